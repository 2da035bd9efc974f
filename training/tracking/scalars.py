"""The one place rank 0 logs a run's scalars: TensorBoard event files and, when configured, the MLflow run.

The driver decides where (`Target`, from the config and $MLFLOW_TRACKING_URI) and hands it to the workers
in the loop config; each sink is optional. A tracking server that stops answering costs a warning, never
the run.
"""

from __future__ import annotations

import os
import resource
import sys
from dataclasses import dataclass

import torch

from training.core.run_dir import RunDir
from training.tracking import mlflow_run
from training.tracking.events import EventFiles


@dataclass(frozen=True)
class Target:
    tensorboard: bool = True
    mlflow_uri: str | None = None
    mlflow_run_id: str | None = None

    @classmethod
    def open(cls, run_dir: RunDir, tensorboard: bool, mlflow_uri: str | None, experiment: str, config: dict):
        """On the driver, before the workers start: opens (or reopens) the MLflow run."""
        uri = mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        run_id = mlflow_run.open_run(uri, experiment, run_dir, config) if uri else None
        return cls(tensorboard, uri, run_id)


class Scalars:
    def __init__(self, run_dir: RunDir, target: Target, purge_step: int | None):
        self.target = target
        self.events = EventFiles(run_dir, purge_step) if target.tensorboard else None
        self.mlflow_failed = False

    def log(self, step: int, values: dict[str, float]) -> None:
        if self.events is not None:
            self.events.scalars(step, values)
        if self.target.mlflow_run_id and not self.mlflow_failed:
            try:
                mlflow_run.log_metrics(self.target.mlflow_uri, self.target.mlflow_run_id, step, values)
            except Exception as exc:  # MLflow's client raises its own and requests' errors: any of them
                self.mlflow_failed = True
                print(f"warning: MLflow stopped taking metrics ({exc}); training goes on", file=sys.stderr)

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
