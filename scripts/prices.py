"""Instance catalog for `make status`: on-demand price per hour and GPUs per instance type.

Prices: US East (N. Virginia), Linux, on-demand list prices as published by AWS in mid-2025 (P4d and P5
after the June 2025 price cut). Other regions differ by a few to tens of percent; Spot is far cheaper.
Check the AWS pricing pages for yours.
"""

from __future__ import annotations

PRICES_AS_OF = "2025-06, us-east-1 on-demand"
# type: (USD per hour, GPUs)
CATALOG = {
    "g5.xlarge": (1.006, 1), "g5.2xlarge": (1.212, 1), "g5.4xlarge": (1.624, 1), "g5.8xlarge": (2.448, 1),
    "g5.12xlarge": (5.672, 4), "g5.24xlarge": (8.144, 4), "g5.48xlarge": (16.288, 8),
    "g6.xlarge": (0.8048, 1), "g6.12xlarge": (4.6016, 4), "g6e.xlarge": (1.861, 1), "g6e.12xlarge": (10.493, 4),
    "p4d.24xlarge": (21.96, 8), "p5.48xlarge": (55.04, 8),
    "m5.large": (0.096, 0), "m5.xlarge": (0.192, 0), "m5.2xlarge": (0.384, 0), "c5.xlarge": (0.17, 0),
}  # fmt: skip


def hourly_cost(instance_types: list[str]) -> tuple[float, list[str]]:
    """Sum of known prices, and the instance types the catalog does not know."""
    known = [t for t in instance_types if t in CATALOG]
    return sum(CATALOG[t][0] for t in known), sorted({t for t in instance_types if t not in CATALOG})


def gpus_of(instance_type: str) -> int | None:
    entry = CATALOG.get(instance_type)
    return entry[1] if entry else None
