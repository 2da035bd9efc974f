"""No security-group rule opens a port to the world or to the VPC; Ray's ports are only self-referenced."""

from __future__ import annotations

import json

from tests.infra.hcl import INFRA, MODULES, load_dir, merged, resources

RULE_TYPES = ("aws_vpc_security_group_ingress_rule", "aws_vpc_security_group_egress_rule", "aws_security_group_rule")


def all_rules():
    for path in [INFRA, *sorted(p for p in MODULES.iterdir() if p.is_dir())]:
        blocks = load_dir(path)
        for kind in RULE_TYPES:
            for name, body in resources(blocks, kind).items():
                yield path.name, kind, name, body
        for name, group in resources(blocks, "aws_security_group").items():
            for direction in ("ingress", "egress"):
                for body in group.get(direction, []):
                    yield path.name, f"inline_{direction}", name, body


def is_ingress(kind: str, body: dict) -> bool:
    return "ingress" in kind or body.get("type") == "ingress"


def test_the_modules_declare_rules_at_all():
    kinds = {kind for _, kind, _, _ in all_rules()}
    assert {"aws_vpc_security_group_ingress_rule", "aws_vpc_security_group_egress_rule"} <= kinds


def test_no_ingress_from_any_cidr():
    for module, kind, name, body in all_rules():
        if is_ingress(kind, body):
            cidrs = [body.get(k) for k in ("cidr_ipv4", "cidr_ipv6", "cidr_blocks", "prefix_list_id") if body.get(k)]
            assert not cidrs, f"{module}: {kind}.{name} admits {cidrs}: ingress must name a security group"
            assert body.get("referenced_security_group_id") or body.get("source_security_group_id"), name


def test_no_rule_names_the_vpc_cidr():
    for module, kind, name, body in all_rules():
        text = json.dumps(body)
        assert "cidr_block" not in text and "var.cidr" not in text, f"{module}: {kind}.{name} uses the VPC CIDR"


def test_egress_to_the_world_is_https_only():
    for module, kind, name, body in all_rules():
        if not is_ingress(kind, body) and body.get("cidr_ipv4") == "0.0.0.0/0":
            assert (body["from_port"], body["to_port"], body["ip_protocol"]) == (443, 443, "tcp"), f"{module}: {name}"
        assert body.get("ip_protocol") != "-1", f"{module}: {kind}.{name} opens every protocol"


def test_ray_ports_are_only_reachable_from_the_ray_group_itself():
    blocks = load_dir(MODULES / "network")
    for kind in ("aws_vpc_security_group_ingress_rule", "aws_vpc_security_group_egress_rule"):
        ray = resources(blocks, kind)["ray"]
        assert ray["for_each"] == "${var.ray_ports}"
        assert ray["security_group_id"] == ray["referenced_security_group_id"] == "${aws_security_group.tasks.id}"
    # the only other ingress of the ray group: none
    ingress = resources(blocks, "aws_vpc_security_group_ingress_rule")
    into_tasks = [n for n, b in ingress.items() if b["security_group_id"] == "${aws_security_group.tasks.id}"]
    assert into_tasks == ["ray"]
    # the instances accept nothing at all
    assert not [n for n, b in ingress.items() if b["security_group_id"] == "${aws_security_group.instances.id}"]


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
