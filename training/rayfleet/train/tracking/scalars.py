"""The one place rank 0 logs a run's scalars: TensorBoard event files and, when configured, the MLflow run
and CloudWatch.

The driver decides where (`Target`, from the config and its environment) and hands it to the workers in
the loop config; each sink is optional. A sink that stops answering costs one warning, never the run.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass

import torch

from rayfleet.core.aws import Aws
from rayfleet.core.run_dir import RunDir
from rayfleet.train.tracking import cloudwatch, mlflow_run
from rayfleet.train.tracking.events import EventFiles


@dataclass(frozen=True)
class Target:
    tensorboard: bool = True
    mlflow_uri: str | None = None
    mlflow_run_id: str | None = None
    cloudwatch: cloudwatch.Destination | None = None

    @classmethod
    def open(cls, run_dir: RunDir, tensorboard: bool, mlflow_uri: str | None, experiment: str, config: dict):
        """On the driver, before the workers start: opens (or reopens) the MLflow run."""
        uri = mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        run_id = mlflow_run.open_run(uri, experiment, run_dir, config) if uri else None
        return cls(tensorboard, uri, run_id, cloudwatch.Destination.from_environment())


class Scalars:
    def __init__(self, run_dir: RunDir, target: Target, purge_step: int | None):
        self.run_dir, self.target = run_dir, target
        self.events = EventFiles(run_dir, purge_step) if target.tensorboard else None
        self.sinks = {}
        if target.mlflow_run_id:
            self.sinks["MLflow"] = lambda step, values: mlflow_run.log_metrics(
                target.mlflow_uri, target.mlflow_run_id, step, values
            )
        if target.cloudwatch is not None:
            client = Aws(target.cloudwatch.region).client("cloudwatch")
            self.sinks["CloudWatch"] = lambda step, values: cloudwatch.publish(
                client, target.cloudwatch, run_dir.run_name, values
            )

    def log(self, step: int, values: dict[str, float]) -> None:
        if self.events is not None:
            self.events.scalars(step, values)
        for name, sink in list(self.sinks.items()):
            try:
                sink(step, values)
            except Exception as exc:  # each client raises its own and its transport's errors: any of them
                del self.sinks[name]
                print(f"warning: {name} stopped taking metrics ({exc}); training goes on", file=sys.stderr)

    def flush(self) -> None:
        if self.events is not None:
            self.events.flush()

    def close(self) -> None:
        if self.events is not None:
            self.events.close()


def memory_gb(device: torch.device) -> float:
    """Peak memory of this process: the GPU's allocator on CUDA, the resident set on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
