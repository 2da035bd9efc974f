"""The sampling and publishing loop.

Every `sample_interval` seconds every GPU is read and folded into statistic sets, per GPU
(ClusterName, InstanceId, InstanceType, GpuIndex), per cluster for the rolled-up metrics (ClusterName; the
idle alarm watches these) and per run (ClusterName, RunName) for each run whose training workers are on
this node at that sample: `runs` is asked every sample (monitoring/current_run.py reads the current-run
files the workers write), so a long-lived sidecar follows the runs as they start and end; without it, the
fixed RAYFLEET_RUN_NAME of the identity, if any. A GPU that reports an uncorrectable ECC error or falls off
the bus marks the node suspect, once, in `health_dir` (monitoring/node_health.py). Every
`publish_interval` seconds the sets become datums in the publisher's bounded buffer and go out. A stop
(SIGTERM from ECS) closes the interval and flushes what is buffered before exiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from monitoring import node_health
from monitoring.aggregate import Aggregator
from monitoring.identity import Identity
from monitoring.log import log
from monitoring.nvml_sampler import NvmlSampler
from monitoring.publisher import Publisher
from monitoring.spec import Spec


class Sidecar:
    def __init__(
        self,
        sampler: NvmlSampler,
        publisher: Publisher,
        identity: Identity,
        spec: Spec,
        sample_interval: float = 10.0,
        publish_interval: float = 60.0,
        high_resolution: bool = False,
        runs: Callable[[], list[str]] | None = None,
        health_dir: str | None = None,
    ):
        self.sampler, self.publisher, self.identity, self.spec = sampler, publisher, identity, spec
        self.sample_interval, self.publish_interval = sample_interval, publish_interval
        self.high_resolution = high_resolution
        self.aggregator = Aggregator()
        self.units = {m.name: m.unit for m in (*spec.metrics, *spec.sidecar_metrics)}
        self.rollups = {m.name for m in spec.metrics if m.rollup}
        self._dropped_logged = 0
        self.runs = runs or (lambda: [identity.run_name] if identity.run_name else [])
        self.current: list[str] = []
        self.health_dir, self.suspect = health_dir, False
        publisher.drop_datum = self._drop_datum

    def _dimensions(
        self, names: tuple[str, ...], gpu_index: int | None = None, run: str | None = None
    ) -> dict[str, str]:
        values = {
            "ClusterName": self.identity.cluster_name,
            "InstanceId": self.identity.instance_id,
            "InstanceType": self.identity.instance_type,
            "RunName": run,
            "GpuIndex": None if gpu_index is None else str(gpu_index),
        }
        return {name: values[name] for name in names}

    def follow_runs(self) -> list[str]:
        """The runs on this node now; a change is logged (the rehearsal and an operator see it)."""
        try:
            runs = sorted(self.runs())
        except OSError as exc:
            log("runs_unreadable", level="warning", reason=str(exc))
            runs = []
        if runs != self.current:
            log("runs_changed", runs=runs, previous=self.current)
            self.current = runs
        return runs

    def check_health(self, samples) -> None:
        """Mark the node suspect the first time a sample shows a bad GPU (no health directory: log only)."""
        found = node_health.reasons(samples)
        if not found or self.suspect:
            return
        self.suspect = True
        try:
            written = node_health.mark_suspect(self.health_dir, found) if self.health_dir else None
        except OSError as exc:
            log("suspect_unwritable", level="error", reasons=found, reason=str(exc))
            return
        log("node_suspect", level="error", reasons=found, file=str(written) if written else None)

    def sample(self) -> None:
        runs = self.follow_runs()
        samples = self.sampler.sample()
        self.check_health(samples)
        for gpu in samples:
            per_gpu = self._dimensions(self.spec.gpu_dimensions, gpu.index)
            for metric, value in gpu.values.items():
                self.aggregator.add(metric, per_gpu, value)
                if metric in self.rollups:
                    self.aggregator.add(metric, self._dimensions(self.spec.cluster_dimensions), value)
                    for run in runs:
                        self.aggregator.add(metric, self._dimensions(self.spec.run_dimensions, run=run), value)

    def close_interval(self) -> int:
        """Turn the interval's statistic sets into datums in the buffer; return how many."""
        timestamp = datetime.now(UTC)
        resolution = 1 if self.high_resolution else 60
        datums = [
            {
                "MetricName": metric,
                "Dimensions": [{"Name": k, "Value": v} for k, v in dims],
                "Timestamp": timestamp,
                "StatisticValues": stats.as_cloudwatch(),
                "Unit": self.units[metric],
                "StorageResolution": resolution,
            }
            for (metric, dims), stats in self.aggregator.drain().items()
        ]
        if self.publisher.dropped > self._dropped_logged:
            log(
                "samples_dropped",
                level="warning",
                dropped=self.publisher.dropped - self._dropped_logged,
                total=self.publisher.dropped,
                buffered=len(self.publisher.buffer),
            )
            self._dropped_logged = self.publisher.dropped
        self.publisher.enqueue(datums)
        return len(datums)

    def _drop_datum(self, count: int) -> dict:
        return {
            "MetricName": "SidecarDroppedSamples",
            "Dimensions": [{"Name": k, "Value": v} for k, v in self._dimensions(self.spec.cluster_dimensions).items()],
            "Timestamp": datetime.now(UTC),
            "Value": float(count),
            "Unit": self.units["SidecarDroppedSamples"],
        }

    def run(self, stop: threading.Event, flush_timeout_s: float = 20.0) -> None:
        log(
            "started",
            gpus=self.sampler.count,
            cluster=self.identity.cluster_name,
            instance=self.identity.instance_id,
            sample_interval_s=self.sample_interval,
            publish_interval_s=self.publish_interval,
        )
        next_publish = time.monotonic() + self.publish_interval
        while not stop.is_set():
            started = time.monotonic()
            self.sample()
            if started >= next_publish:
                self.close_interval()
                sent = self.publisher.flush()
                if sent:
                    log("published", datums=sent, buffered=len(self.publisher.buffer))
                next_publish += self.publish_interval
            stop.wait(max(0.0, self.sample_interval - (time.monotonic() - started)))
        self.shutdown(flush_timeout_s)

    def shutdown(self, flush_timeout_s: float) -> None:
        """Close the open interval and flush, retrying within the timeout (ECS allows 30 s after SIGTERM)."""
        self.close_interval()
        deadline = time.monotonic() + flush_timeout_s
        while self.publisher.buffer and time.monotonic() < deadline:
            self.publisher.flush(force=True)
            if self.publisher.buffer:
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        log(
            "stopped",
            published=self.publisher.published,
            unsent=len(self.publisher.buffer),
            dropped=self.publisher.dropped,
        )
