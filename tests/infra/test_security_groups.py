"""The Ray ports catalog the nodes start with is the one the security groups open. The rendered rules
themselves (no world or VPC ingress, HTTPS-only egress, Ray ports self-referenced) are asserted by
`terraform test` in infra/tests/network.tftest.hcl."""

from __future__ import annotations

import json

from tests.infra.hcl import INFRA, MODULES, load_dir, merged, resources


def test_the_ports_ray_is_started_with_are_the_ports_the_group_opens():
    ports = json.loads((INFRA / "catalog" / "ray_ports.json").read_text())
    assert {"gcs", "dashboard", "client", "object_manager", "node_manager", "workers"} <= set(ports)
    for name, span in ports.items():
        assert 1024 <= span["from"] <= span["to"] <= 65535, name
    root_modules = merged(load_dir(INFRA), "module")
    assert root_modules["network"]["ray_ports"] == "${local.ray_ports}"
    assert root_modules["ray"]["ray_ports"] == "${local.ray_ports}"
    locals_ = merged(load_dir(MODULES / "ray"), "locals")
    assert "jsonencode(var.ray_ports)" in json.dumps(locals_["ray_environment"])


# The one place an all-traffic rule is allowed, and why (issue 15 item 9): EFA's OS-bypass traffic (SRD) is
# neither TCP nor UDP, and AWS requires the security group of EFA interfaces to allow all inbound and outbound
# traffic from and to itself ("Prepare an EFA-enabled security group", Amazon EC2 User Guide). The group
# exists only with `workers.efa` and is attached only to the workers' EFA interfaces (infra/modules/cluster).
ALL_TRAFFIC_EXCEPTIONS = {
    ("aws_vpc_security_group_ingress_rule", "efa"): "EFA: all traffic from the EFA group itself (AWS requirement)",
    ("aws_vpc_security_group_egress_rule", "efa"): "EFA: all traffic to the EFA group itself (AWS requirement)",
}


def test_all_traffic_rules_are_only_the_efa_groups_self_references():
    network = load_dir(MODULES / "network")
    found = {}
    for kind in ("aws_vpc_security_group_ingress_rule", "aws_vpc_security_group_egress_rule"):
        for name, rule in resources(network, kind).items():
            if str(rule.get("ip_protocol")) in ("-1", "all"):
                found[(kind, name)] = rule
    assert set(found) == set(ALL_TRAFFIC_EXCEPTIONS), sorted(found)
    for rule in found.values():
        assert rule["security_group_id"] == rule["referenced_security_group_id"] == "${aws_security_group.efa[0].id}"
        assert not {"cidr_ipv4", "cidr_ipv6", "prefix_list_id"} & set(rule)
        assert rule["count"] == "${var.efa ? 1 : 0}"  # only in the EFA shape
    group = resources(network, "aws_security_group")["efa"]
    assert group["count"] == "${var.efa ? 1 : 0}"
    assert "EFA" in group["description"] and "among themselves" in group["description"]
