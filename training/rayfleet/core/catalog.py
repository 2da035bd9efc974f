"""Instance catalog for `make status`: on-demand price per hour and GPUs per instance type.

The facts live in `instance_types.json` beside this module (package data), which Terraform reads too (task sizing, GPU
reservations, EFA support), so the scripts and the infra cannot disagree on an instance's shape.
Prices: US East (N. Virginia), Linux, on-demand list prices as published by AWS in mid-2025 (P4d and P5
after the June 2025 price cut). Other regions differ by a few to tens of percent; Spot is far cheaper.
"""

from __future__ import annotations

import json
from importlib import resources

CATALOG_FILE = resources.files(__package__) / "instance_types.json"
_DATA = json.loads(CATALOG_FILE.read_text())
PRICES_AS_OF = _DATA["prices_as_of"]
INSTANCE_TYPES: dict[str, dict] = _DATA["instance_types"]
NETWORK_PRICES: dict[str, float] = _DATA["network_usd_per_hour"]  # NAT gateway; interface endpoint per zone
CACHE_NODE_PRICES: dict[str, float] = _DATA["cache_nodes_usd_per_hour"]  # ElastiCache Valkey: the GCS store's nodes


def hourly_cost(instance_types: list[str]) -> tuple[float, list[str]]:
    """Sum of known prices, and the instance types the catalog does not know."""
    known = [t for t in instance_types if t in INSTANCE_TYPES]
    unknown = sorted({t for t in instance_types if t not in INSTANCE_TYPES})
    return sum(INSTANCE_TYPES[t]["usd_per_hour"] for t in known), unknown


def gpus_of(instance_type: str) -> int | None:
    entry = INSTANCE_TYPES.get(instance_type)
    return entry["gpus"] if entry else None


def accelerators() -> set[str]:
    """The GPUs the catalog's instance types carry (A10G, L4, ...): what resources.accelerator may say."""
    return {t["accelerator"] for t in INSTANCE_TYPES.values() if t.get("accelerator")}


def accelerator_of(instance_type: str) -> str | None:
    entry = INSTANCE_TYPES.get(instance_type)
    return entry.get("accelerator") if entry else None
