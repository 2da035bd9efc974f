"""What a recipe run holds and what it costs: recorded in run.json (`held`) at submission and the run's cost
(`cost_usd`) written when it ends; `make runs` shows it. Local runs hold this machine: $0. On ECS the run
holds the worker instances its resources need (the head and trainer are the cluster's, shared by its runs),
priced at the catalog's on-demand list price (rayfleet/core/catalog.py), or for Spot workers at the mean of
EC2's Spot price history over the hour before submission (all zones of the region).

A run's time is that of every attempt run.json lists (`spent_s`: each submission, and each trainer task lost
on ECS, rayfleet/targets/run.py) plus the one in progress (`attempt_started`); its budget and cost count them all.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime

from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.recipes.fit import Capacity
from rayfleet.recipes.schema import Recipe


def held_local() -> dict:
    return {"where": "local", "instances": [], "usd_per_hour": 0.0}


def spot_usd_per_hour(ec2, instance_type: str, start: datetime, end: datetime) -> float | None:
    """The mean Spot price of `instance_type` (Linux) over [start, end] in the client's region; None if none."""
    pages = ec2.get_paginator("describe_spot_price_history").paginate(
        InstanceTypes=[instance_type], ProductDescriptions=["Linux/UNIX"], StartTime=start, EndTime=end
    )
    prices = [float(p["SpotPrice"]) for page in pages for p in page["SpotPriceHistory"]]
    return statistics.fmean(prices) if prices else None


def held_ecs(recipe: Recipe, instance_type: str, capacity: Capacity | None, spot_price: float | None = None) -> dict:
    """The worker instances the recipe's workers fill (by GPUs, else CPUs), at the on-demand list price, or at
    `spot_price` (per instance-hour) for Spot workers."""
    res = recipe.resources
    if capacity is None or instance_type not in INSTANCE_TYPES:
        return {
            "where": "ecs",
            "instances": [],
            "usd_per_hour": 0.0,
            "priced": f"{instance_type or '?'}: not in the catalog",
        }
    if res.gpus_per_worker and capacity.gpus:
        count = math.ceil(res.workers * res.gpus_per_worker / capacity.gpus)
    else:
        count = math.ceil(res.workers * res.cpus_per_worker / capacity.cpus)
    spot = spot_price is not None
    price = spot_price if spot else INSTANCE_TYPES[instance_type]["usd_per_hour"]
    return {
        "where": "ecs",
        "instances": [{"instance_type": instance_type, "count": count, "lifecycle": "spot" if spot else "on-demand"}],
        "usd_per_hour": round(count * price, 4),
        "priced": "Spot price history, mean of the hour before submission" if spot else "on-demand list price",
    }


def spent_s(record: dict) -> float:
    """The time of every attempt run.json lists, lost trainer tasks included."""
    return sum(attempt.get("duration_s") or 0.0 for attempt in record.get("attempts") or [])


def attempt_started(record: dict) -> datetime | None:
    """When the attempt in progress began to hold the workers: its job's submission, or before that its trainer
    task's launch (ECS; `rayfleet launch` runs have only that). A submission older than the launch was an earlier
    trainer task's, already counted in `spent_s`."""
    submitted, launched = (
        datetime.fromisoformat(record[k]) if record.get(k) else None for k in ("submitted_at", "launched_at")
    )
    if submitted is not None and (launched is None or submitted >= launched):
        return submitted
    return launched


def cost_usd(held: dict | None, duration_s: float | None) -> float | None:
    if not held or duration_s is None:
        return None
    return round(held.get("usd_per_hour", 0.0) * duration_s / 3600, 4)


def spend_usd(ec2, instances: list[dict], now: datetime) -> tuple[float, datetime | None]:
    """What the cluster's running instances cost since each started ({instance_type, launch_time, lifecycle}),
    and the earliest start: on-demand at the list price, Spot at the mean price since its launch."""
    total, since = 0.0, None
    for instance in instances:
        launched = instance.get("launch_time")
        if launched is None or instance["instance_type"] not in INSTANCE_TYPES:
            continue
        price = INSTANCE_TYPES[instance["instance_type"]]["usd_per_hour"]
        if instance.get("lifecycle") == "spot":
            price = spot_usd_per_hour(ec2, instance["instance_type"], launched, now) or price
        total += price * (now - launched).total_seconds() / 3600
        since = launched if since is None else min(since, launched)
    return round(total, 2), since
