"""What `rayfleet deploy` says before it asks: the plan's changes counted, what the deployment costs per hour
running, idle and stopped, and the shape the preflight checks. Read from real plans: the pinned Terraform
plans infra/ offline with the stand-in providers (tools/terraform_standin/render.py rendered_plan)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rayfleet.core.catalog import CACHE_NODE_PRICES, INSTANCE_TYPES, NETWORK_PRICES
from rayfleet.ops.deploy import plan_summary
from tools.terraform_standin.render import rendered_plan

NAT = NETWORK_PRICES["nat_gateway"]
ENDPOINT = NETWORK_PRICES["interface_endpoint_per_zone"]


def price(kind: str) -> float:
    return INSTANCE_TYPES[kind]["usd_per_hour"]


def test_the_default_deployment_costs_its_head_groups_and_nat():
    plan = rendered_plan()
    priced = plan_summary.cost(plan)
    groups = 2 * price("g5.xlarge") + 2 * price("g5.12xlarge")  # ddp and fsdp at their max
    assert priced.running == pytest.approx(price("m5.2xlarge") + groups + NAT, abs=1e-3)
    assert priced.idle == pytest.approx(price("m5.2xlarge") + NAT, abs=1e-3)  # each group at its min (0), head up
    assert priced.stopped == pytest.approx(NAT, abs=1e-3)
    lines = plan_summary.describe(plan)
    assert lines[0].startswith("plan: ") and lines[0].endswith(" to add, 0 to change, 0 to destroy")
    assert lines[1].startswith("cost: $13.79/h running, $0.429/h idle (autostopped), $0.045/h stopped")
    assert "  worker group ddp: 0-2 x g5.xlarge at $1.006/h, $2.01/h at full size" in lines
    assert "  worker group fsdp: 0-2 x g5.12xlarge at $5.672/h, $11.34/h at full size" in lines
    assert "  autostop: after 30 idle minutes each group goes to its min" in lines
    shape = plan_summary.shape_of(plan)
    assert shape.head_instance_type == "m5.2xlarge" and [(g.name, g.instance_types, g.count) for g in shape.groups] == [
        ("ddp", ("g5.xlarge",), 2),
        ("fsdp", ("g5.12xlarge",), 2),
    ]
    assert not any(g.spot for g in shape.groups) and shape.az_count == 1 and shape.region == "us-east-1"
    assert shape.zones == ("us-east-1a",)  # the private subnets' zones, as planned


def test_one_group_is_priced_from_its_tfvars():
    plan = rendered_plan(var_files=["one-group.tfvars"])
    priced = plan_summary.cost(plan)
    assert priced.running == pytest.approx(price("m5.xlarge") + 2 * price("g5.xlarge") + NAT, abs=1e-3)
    assert priced.idle == priced.running  # min = max = 2: its group never stops
    assert [g.name for g in plan_summary.shape_of(plan).groups] == ["default"]


def test_spot_endpoints_two_zones_a_stopping_head_and_a_gcs_store(tmp_path):
    tfvars = tmp_path / "shape.tfvars"
    tfvars.write_text(
        "az_count = 2\ninterface_endpoints = true\nautostop = { idle_minutes = 15, head = true }\n"
        "gcs_store = { enabled = true, replicas = 1 }\n"
        'head_instance_type = "m5.xlarge"\nconcurrent_runs = 1\n'
        'worker_groups = { spot = { instance_types = ["g5.2xlarge", "g5.xlarge"], max = 3, spot = "spot-only" } }\n'
    )
    plan = rendered_plan(var_files=[tfvars])
    priced = plan_summary.cost(plan)
    endpoints = [
        c
        for c in plan["resource_changes"]
        if c["type"] == "aws_vpc_endpoint" and c["change"]["after"].get("vpc_endpoint_type") == "Interface"
    ]
    assert endpoints  # the variable turned them on
    store = 2 * CACHE_NODE_PRICES["cache.t4g.micro"]  # a primary and one replica, on whatever else is stopped
    network = 2 * NAT + len(endpoints) * 2 * ENDPOINT + store
    assert priced.stopped == pytest.approx(network, abs=1e-3)
    assert priced.idle == pytest.approx(network, abs=1e-3)  # autostop.head: nothing but the network stays
    assert priced.running == pytest.approx(price("m5.xlarge") + 3 * price("g5.2xlarge") + network, abs=1e-3)
    shape = plan_summary.shape_of(plan)
    (group,) = shape.groups
    assert group.spot is True and group.instance_types == ("g5.2xlarge", "g5.xlarge")
    assert group.count == 3 and shape.az_count == 2
    assert "  gcs store: 2 x cache.t4g.micro at $0.0128/h, always on (also stopped or autostopped)" in (
        plan_summary.describe(plan)
    )


def test_changes_count_a_replacement_as_an_add_and_a_destroy():
    plan = {
        "resource_changes": [
            {"change": {"actions": ["create"]}},
            {"change": {"actions": ["delete", "create"]}},
            {"change": {"actions": ["update"]}},
            {"change": {"actions": ["no-op"]}},
        ]
    }
    assert plan_summary.summary(plan) == "2 to add, 1 to change, 1 to destroy"
    assert plan_summary.summary({"resource_changes": [{"change": {"actions": ["no-op"]}}]}).startswith("no changes")
    with pytest.raises(Exception, match="the plan builds no head node group"):
        plan_summary.shape_of(plan)


def test_the_readmes_cost_table_is_what_deploy_prints():
    """README.md's rates for the default and the one-group deployments are the ones `rayfleet deploy` computes from
    their plans."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for var_files in ((), ("one-group.tfvars",)):
        priced = plan_summary.cost(rendered_plan(var_files=var_files))
        for rate in (priced.running, priced.idle, priced.stopped):
            assert f"**{plan_summary.usd(rate)}/h**" in readme, (var_files, rate)
