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
from rayfleet.ecs.preflight import Shape
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
    running: float  # per hour, head and every worker up
    idle: float  # per hour after an autostop: the workers at zero (the head too when autostop.head)
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


def cost(plan: dict) -> Cost:
    templates, groups = _after(plan, "aws_launch_template"), _after(plan, "aws_autoscaling_group")
    nodes: dict[str, tuple[str, int, float]] = {}  # group -> (type, count, price per instance-hour)
    for key, template in templates.items():
        kind = template.get("instance_type") or "?"
        count = int((groups.get(key) or {}).get("max_size") or 0)
        nodes[key] = (kind, count, INSTANCE_TYPES.get(kind, {}).get("usd_per_hour", 0.0))
    zones = len(_after(plan, "aws_nat_gateway"))
    endpoints = [e for e in _after(plan, "aws_vpc_endpoint").values() if e.get("vpc_endpoint_type") == "Interface"]
    network = (
        zones * NETWORK_PRICES["nat_gateway"] + len(endpoints) * zones * NETWORK_PRICES["interface_endpoint_per_zone"]
    )
    network += store_cost(plan)  # like the network, the GCS store runs whether the instances do or not
    autostop = (plan.get("variables", {}).get("autostop", {}) or {}).get("value") or {}
    head_stops = bool(autostop.get("head"))
    compute = {key: count * price for key, (_, count, price) in nodes.items()}
    running = sum(compute.values()) + network
    idle = network + (0.0 if head_stops else compute.get("head", 0.0))
    lines = [
        f"{key}: {count} x {kind} at ${price:.3f}/h" + ("" if kind in INSTANCE_TYPES else " (not in the catalog)")
        for key, (kind, count, price) in sorted(nodes.items())
    ]
    lines.append(f"network: {zones} NAT gateway(s), {len(endpoints)} interface endpoint(s) x {zones} zone(s)")
    lines += [store_line(plan)] if _after(plan, "aws_elasticache_replication_group") else []
    minutes = autostop.get("idle_minutes")
    if minutes:
        lines.append(f"autostop: after {minutes:g} idle minutes the workers{' and head' * head_stops} scale to zero")
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


def describe(plan: dict) -> list[str]:
    """The lines `deploy` prints before asking."""
    priced = cost(plan)
    return [
        f"plan: {summary(plan)}",
        f"cost: {usd(priced.running)}/h running, {usd(priced.idle)}/h idle (autostopped), "
        f"{usd(priced.stopped)}/h stopped (rayfleet deploy stop), "
        f"about ${priced.running * 24 * 30:,.0f}/month always on",
        *(f"  {line}" for line in priced.lines),
    ]


def shape_of(plan: dict) -> Shape:
    """What the preflight checks, read from the plan: the node groups' types and sizes, Spot, the zones."""
    templates, groups = _after(plan, "aws_launch_template"), _after(plan, "aws_autoscaling_group")
    if "head" not in templates or "worker" not in templates:
        raise RayfleetError("the plan builds no head and worker node groups: is this infra/ of rayfleet?")
    worker_group = groups.get("worker") or {}
    policy = (worker_group.get("mixed_instances_policy") or [{}])[0]
    distribution = (policy.get("instances_distribution") or [{}])[0]
    overrides = ((policy.get("launch_template") or [{}])[0]).get("override") or []
    main = templates["worker"].get("instance_type") or ""
    spot_types = [o["instance_type"] for o in overrides if o.get("instance_type") and o["instance_type"] != main]
    private = [s for s in plan_values(plan, "aws_subnet") if (s.get("tags") or {}).get("Tier") == "private"]
    variables = {k: (v or {}).get("value") for k, v in plan.get("variables", {}).items()}
    return Shape(
        region=variables.get("region") or "us-east-1",
        head_instance_type=templates["head"].get("instance_type") or "",
        worker_instance_types=(main, *spot_types),
        worker_count=int(worker_group.get("max_size") or 0),
        worker_spot=distribution.get("on_demand_percentage_above_base_capacity") == 0,
        zones=tuple(sorted(s["availability_zone"] for s in private if s.get("availability_zone"))),
        az_count=len(private) or 1,
        worker_on_demand_base=int(distribution.get("on_demand_base_capacity") or 0),
    )


def plan_values(plan: dict, type_name: str) -> list[dict]:
    return list(_after(plan, type_name).values())
