"""Metric names, units and dimensions, from monitoring/metrics.json (the one source the Terraform reads too)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

SPEC_FILE = Path(__file__).with_name("metrics.json")


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    title: str
    rollup: bool = False


@dataclass(frozen=True)
class Spec:
    namespace: str
    gpu_dimensions: tuple[str, ...]
    cluster_dimensions: tuple[str, ...]
    run_dimensions: tuple[str, ...]
    metrics: tuple[Metric, ...]
    sidecar_metrics: tuple[Metric, ...]
    training_metrics: tuple[Metric, ...]
    idle_alarm: dict

    def metric(self, name: str) -> Metric:
        for metric in (*self.metrics, *self.sidecar_metrics):
            if metric.name == name:
                return metric
        raise KeyError(f"{name} is not in {SPEC_FILE.name}")


@cache
def load(path: Path = SPEC_FILE) -> Spec:
    raw = json.loads(Path(path).read_text())
    return Spec(
        namespace=raw["namespace"],
        gpu_dimensions=tuple(raw["gpu_dimensions"]),
        cluster_dimensions=tuple(raw["cluster_dimensions"]),
        run_dimensions=tuple(raw["run_dimensions"]),
        metrics=tuple(Metric(**m) for m in raw["metrics"]),
        sidecar_metrics=tuple(Metric(**m) for m in raw["sidecar_metrics"]),
        training_metrics=tuple(Metric(**m) for m in raw["training_metrics"]),
        idle_alarm=raw["idle_alarm"],
    )
