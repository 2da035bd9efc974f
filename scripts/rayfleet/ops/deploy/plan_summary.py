"""What a saved Terraform plan does, in a few lines: its changes counted, and what the deployment it leaves
costs per hour running, idle after an autostop, and stopped. `make deploy` shows both, then asks.

The cost comes from the plan itself (`terraform show -json`): the instance type of each node group's launch
template, the groups' maximum sizes, the NAT gateways and the interface endpoints, priced from the catalog
(rayfleet/core/instance_types.json, on-demand list prices). Whatever the tfvars say, the figures follow
what Terraform will build. Data transfer, storage and logs are usage, not a rate, and are left out (said).
"""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from dataclasses import dataclass

from rayfleet.core.catalog import CACHE_NODE_PRICES, INSTANCE_TYPES, NETWORK_PRICES, PRICES_AS_OF
from rayfleet.core.errors import RayfleetError
from rayfleet.ecs.preflight import GroupShape, Shape
from rayfleet.ops.deploy.files import INFRA, PLAN_FILE


def saved_plan(binary: str) -> dict:
    """`terraform show -json` of the plan `deploy` saved."""
    result = subprocess.run(
        [binary, f"-chdir={INFRA}", "show", "-json", PLAN_FILE], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RayfleetError(f"terraform show failed: {result.stderr.strip()[:300]}")
    return json.loads(result.stdout or "{}")


def changes(plan: dict) -> Counter:
    """Resources to add, change and destroy (a replacement counts as one add and one destroy), as Terraform's
    own `Plan:` line counts them."""
    counted: Counter = Counter()
    for change in plan.get("resource_changes", []):
        actions = change.get("change", {}).get("actions", [])
        counted["add"] += "create" in actions
        counted["change"] += actions == ["update"]
        counted["destroy"] += "delete" in actions
    return counted


def summary(plan: dict) -> str:
    counted = changes(plan)
    if not any(counted.values()):
        return "no changes: the deployment already matches the configuration"
    return f"{counted['add']} to add, {counted['change']} to change, {counted['destroy']} to destroy"


@dataclass(frozen=True)
class Cost:
    running: float  # per hour, the head and every worker group at its max
    idle: float  # per hour after an autostop: each group at its min (the head stopped too when autostop.head)
    stopped: float  # per hour after `make stop`: no instances; what stays is the network
    lines: tuple[str, ...]  # what each figure is made of, one line each


def _after(plan: dict, type_name: str) -> dict[str, dict]:
    """The planned values of every resource of a type, by its for_each key (or address), deleted ones left out."""
    found = {}
    for change in plan.get("resource_changes", []):
        if change.get("type") == type_name and change.get("change", {}).get("actions") != ["delete"]:
            index = change.get("index")  # a for_each key (head, worker) names it; a count index does not
            found[index if isinstance(index, str) else change["address"]] = change["change"].get("after") or {}
    return found


def planned_groups(plan: dict) -> dict[str, dict]:
    """The worker groups the plan leaves, as its `worker_groups` output describes them (what is known before
    apply: types, min and max nodes, Spot policy)."""
    groups = ((plan.get("output_changes") or {}).get("worker_groups") or {}).get("after")
    if not isinstance(groups, dict) or not groups:
        raise RayfleetError("the plan has no worker_groups output: is this infra/ of rayfleet?")
    return groups


def _price(kind: str) -> float:
    return INSTANCE_TYPES.get(kind, {}).get("usd_per_hour", 0.0)


def cost(plan: dict) -> Cost:
    """Per hour: running (the head and every group at its max), idle (autostopped: the groups at their min, the
    head unless autostop.head) and stopped (the network alone)."""
    head_type = (_after(plan, "aws_launch_template").get("head") or {}).get("instance_type") or "?"
    groups = planned_groups(plan)
    zones = len(_after(plan, "aws_nat_gateway"))
    endpoints = [e for e in _after(plan, "aws_vpc_endpoint").values() if e.get("vpc_endpoint_type") == "Interface"]
    network = (
        zones * NETWORK_PRICES["nat_gateway"] + len(endpoints) * zones * NETWORK_PRICES["interface_endpoint_per_zone"]
    )
    network += store_cost(plan)  # like the network, the GCS store runs whether the instances do or not
    autostop = (plan.get("variables", {}).get("autostop", {}) or {}).get("value") or {}
    head_stops = bool(autostop.get("head"))
    head = _price(head_type)
    lines = [
        f"head: 1 x {head_type} at ${head:.3f}/h" + ("" if head_type in INSTANCE_TYPES else " (not in the catalog)")
    ]
    running, idle = head + network, network + (0.0 if head_stops else head)
    for name, g in sorted(groups.items()):
        kind = (g.get("instance_types") or ["?"])[0]
        most, least = int(g.get("max_nodes") or 0), int(g.get("min_nodes") or 0)
        running, idle = running + most * _price(kind), idle + least * _price(kind)
        known = "" if kind in INSTANCE_TYPES else " (not in the catalog)"
        lines.append(
            f"worker group {name}: {least}-{most} x {kind} at ${_price(kind):.3f}/h{known}, "
            f"${most * _price(kind):.2f}/h at full size"
            + (f", {g.get('spot')}" if g.get("spot") != "on-demand" else "")
        )
    lines.append(f"network: {zones} NAT gateway(s), {len(endpoints)} interface endpoint(s) x {zones} zone(s)")
    lines += [store_line(plan)] if _after(plan, "aws_elasticache_replication_group") else []
    minutes = autostop.get("idle_minutes")
    if minutes:
        lines.append(
            f"autostop: after {minutes:g} idle minutes each group goes to its min{' and the head stops' * head_stops}"
        )
    lines.append(f"on-demand list prices ({PRICES_AS_OF}); Spot is cheaper; data transfer, storage and logs extra")
    return Cost(round(running, 3), round(idle, 3), round(network, 3), tuple(lines))


def _store_nodes(plan: dict) -> list[tuple[str, int]]:
    """(node type, nodes) of each GCS store (gcs_store.enabled) the plan leaves."""
    stores = _after(plan, "aws_elasticache_replication_group").values()
    return [(s.get("node_type") or "?", int(s.get("num_cache_clusters") or 1)) for s in stores]


def store_cost(plan: dict) -> float:
    return sum(count * CACHE_NODE_PRICES.get(kind, 0.0) for kind, count in _store_nodes(plan))


def store_line(plan: dict) -> str:
    parts = [
        f"{count} x {kind} at ${CACHE_NODE_PRICES.get(kind, 0.0):.4f}/h"
        + ("" if kind in CACHE_NODE_PRICES else " (not in the catalog)")
        for kind, count in _store_nodes(plan)
    ]
    return f"gcs store: {', '.join(parts)}, always on (also stopped or autostopped)"


def usd(value: float) -> str:
    return f"${value:.2f}" if value >= 1 else f"${value:.3f}"


def destroyed_node_groups(plan: dict) -> list[str]:
    """The worker node groups whose Auto Scaling group the plan deletes (their instances go with it)."""
    return sorted(
        str(c.get("index"))
        for c in plan.get("resource_changes", [])
        if c.get("type") == "aws_autoscaling_group"
        and "delete" in c.get("change", {}).get("actions", [])
        and str(c.get("index", "")).startswith("worker")
    )


def describe(plan: dict) -> list[str]:
    """The lines `deploy` prints before asking."""
    priced = cost(plan)
    gone = destroyed_node_groups(plan)
    warning = (
        [
            f"warning: the plan destroys the worker node group(s) {', '.join(gone)} and their instances"
            + (
                "; a deployment made before worker groups keeps its workers with TFVARS=one-group.tfvars"
                if "worker" in gone
                else ""
            )
        ]
        if gone
        else []
    )
    return [
        f"plan: {summary(plan)}",
        *warning,
        f"cost: {usd(priced.running)}/h running, {usd(priced.idle)}/h idle (autostopped), "
        f"{usd(priced.stopped)}/h stopped (rayfleet deploy stop), "
        f"about ${priced.running * 24 * 30:,.0f}/month always on",
        *(f"  {line}" for line in priced.lines),
    ]


def shape_of(plan: dict) -> Shape:
    """What the preflight checks, read from the plan: the head's type, each worker group at full size, the zones."""
    templates = _after(plan, "aws_launch_template")
    if "head" not in templates:
        raise RayfleetError("the plan builds no head node group: is this infra/ of rayfleet?")
    groups = tuple(
        GroupShape(
            name,
            tuple(g.get("instance_types") or ()),
            int(g.get("max_nodes") or 0),
            spot=(g.get("spot") or "on-demand") != "on-demand",
            on_demand_base=int(g.get("on_demand_base") or 0),
        )
        for name, g in sorted(planned_groups(plan).items())
        if g.get("instance_types")
    )
    private = [s for s in plan_values(plan, "aws_subnet") if (s.get("tags") or {}).get("Tier") == "private"]
    variables = {k: (v or {}).get("value") for k, v in plan.get("variables", {}).items()}
    return Shape(
        region=variables.get("region") or "us-east-1",
        head_instance_type=templates["head"].get("instance_type") or "",
        groups=groups,
        zones=tuple(sorted(s["availability_zone"] for s in private if s.get("availability_zone"))),
        az_count=len(private) or 1,
    )


def plan_values(plan: dict, type_name: str) -> list[dict]:
    return list(_after(plan, type_name).values())
