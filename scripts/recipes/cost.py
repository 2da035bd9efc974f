"""What a recipe run holds and what it costs: recorded in run.json (`held`) at submission, priced from the
instance catalog (on-demand list prices, training/core/catalog.py), and the run's cost (`cost_usd`) written
when it ends; `make runs` shows it. Local runs hold this machine: $0. On ECS the run holds the worker
instances its resources need (the head and trainer are the cluster's, shared by its runs)."""

from __future__ import annotations

import math

from scripts.recipes.schema import Capacity, Recipe
from training.core.catalog import INSTANCE_TYPES


def held_local() -> dict:
    return {"where": "local", "instances": [], "usd_per_hour": 0.0}


def held_ecs(recipe: Recipe, instance_type: str, capacity: Capacity | None) -> dict:
    """The worker instances the recipe's workers fill (by GPUs, else CPUs), at the on-demand list price."""
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
    price = INSTANCE_TYPES[instance_type]["usd_per_hour"]
    return {
        "where": "ecs",
        "instances": [{"instance_type": instance_type, "count": count, "lifecycle": "on-demand"}],
        "usd_per_hour": round(count * price, 4),
        "priced": "on-demand list price of the worker instances",
    }


def cost_usd(held: dict | None, duration_s: float | None) -> float | None:
    if not held or duration_s is None:
        return None
    return round(held.get("usd_per_hour", 0.0) * duration_s / 3600, 4)
