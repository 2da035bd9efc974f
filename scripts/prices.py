"""On-demand prices per instance-hour, for `make status`'s cost line. Check the AWS pricing pages for yours.

US East (N. Virginia), Linux, on-demand list prices as published by AWS in mid-2025 (P4d and P5 after the
June 2025 price cut). Other regions differ by a few to tens of percent; Spot is far cheaper.
"""

from __future__ import annotations

PRICES_AS_OF = "2025-06, us-east-1 on-demand"
USD_PER_HOUR = {
    "g5.xlarge": 1.006, "g5.2xlarge": 1.212, "g5.4xlarge": 1.624, "g5.8xlarge": 2.448,
    "g5.12xlarge": 5.672, "g5.24xlarge": 8.144, "g5.48xlarge": 16.288,
    "g6.xlarge": 0.8048, "g6.12xlarge": 4.6016, "g6e.xlarge": 1.861, "g6e.12xlarge": 10.493,
    "p4d.24xlarge": 21.96, "p5.48xlarge": 55.04,
    "m5.large": 0.096, "m5.xlarge": 0.192, "m5.2xlarge": 0.384, "c5.xlarge": 0.17,
}  # fmt: skip


def hourly_cost(instance_types: list[str]) -> tuple[float, list[str]]:
    """Sum of known prices, and the instance types the table does not know."""
    known = [t for t in instance_types if t in USD_PER_HOUR]
    return sum(USD_PER_HOUR[t] for t in known), sorted({t for t in instance_types if t not in USD_PER_HOUR})
