"""Statistic sets between publishes: min, max, sum and count per (metric, dimensions).

CloudWatch takes these as `StatisticValues`, so one datum per metric per publish carries every sample of
the interval: at a 10 s sample and 60 s publish interval that is 6x fewer datums than raw values.
"""

from __future__ import annotations

from dataclasses import dataclass

Key = tuple[str, tuple[tuple[str, str], ...]]  # (metric, sorted dimensions)


@dataclass
class StatisticSet:
    minimum: float
    maximum: float
    total: float
    count: int

    def add(self, value: float) -> None:
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        self.total += value
        self.count += 1

    def as_cloudwatch(self) -> dict:
        return {"SampleCount": float(self.count), "Sum": self.total, "Minimum": self.minimum, "Maximum": self.maximum}


class Aggregator:
    def __init__(self):
        self._sets: dict[Key, StatisticSet] = {}

    def add(self, metric: str, dimensions: dict[str, str], value: float) -> None:
        key = (metric, tuple(sorted(dimensions.items())))
        stats = self._sets.get(key)
        if stats is None:
            self._sets[key] = StatisticSet(value, value, value, 1)
        else:
            stats.add(value)

    def drain(self) -> dict[Key, StatisticSet]:
        """Everything since the last drain; starts a new interval."""
        sets, self._sets = self._sets, {}
        return sets

    def __len__(self) -> int:
        return len(self._sets)
