"""The keys every job shares, and their checks: one base that DDPConfig and FSDPConfig extend.

Cluster shape (num_workers, cpus_per_worker, device), numerics (precision, seed), where results go
(storage, s3_endpoint_url, run_name), fault tolerance (max_failures, max_preemptions, preemption checks,
keep_checkpoints) and what the run reports while it trains (progress lines, TensorBoard, MLflow:
rayfleet/train/tracking/). A job adds only its own keys; a check written here holds for every job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rayfleet.core.config import StrictModel
from rayfleet.core.run_dir import LOCAL_RUNS
from rayfleet.core.run_name import RUN_NAME_PATTERN


class JobConfig(StrictModel):
    # Cluster shape
    num_workers: int = Field(2, ge=1, description="Ray Train workers (one process, one GPU each on GPU)")
    min_workers: int | None = Field(
        None,
        ge=1,
        description="elastic: start with what fits between this and num_workers, go on with fewer after a loss, "
        "grow when workers free up (each change restarts the group from the last checkpoint); None: fixed",
    )
    elastic_resize_s: float = Field(60.0, gt=0, description="elastic: how often Ray Train looks for more workers")
    cpus_per_worker: float = Field(1.0, gt=0)
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when the cluster has GPUs")
    # Numerics
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto", description="auto: bf16 where native (GPUs; CPUs with AVX512-BF16 or AMX)"
    )
    seed: int = Field(0, ge=0)
    # Where results go
    storage: str = Field(LOCAL_RUNS, description="a local directory or s3://bucket/prefix")
    s3_endpoint_url: str | None = Field(None, description="for S3-compatible stores (MinIO, moto)")
    run_name: str | None = Field(None, pattern=RUN_NAME_PATTERN)
    # Fault tolerance
    max_failures: int = Field(
        3, ge=-1, description="worker-group restarts after failures, each from the last checkpoint; -1: no limit"
    )
    max_preemptions: int = Field(-1, ge=-1, description="restarts after node preemptions (not failures); -1: no limit")
    preemption_check_steps: int = Field(
        10,
        ge=0,
        description="ask Ray Train every N steps whether a node is being preempted (DDP: after its first epoch, "
        "every multiple of N that comes about once a second); 0: never",
    )
    keep_checkpoints: int = Field(2, ge=1)
    hang_floor_s: float = Field(
        300.0,
        ge=0,
        description="hung: a rank inside a step and no rank finished one for max(hang_factor x the median step, "
        "this many seconds); the node that did not arrive is marked suspect and the group restarts; 0: no watchdog",
    )
    hang_factor: float = Field(20.0, gt=0, description="see hang_floor_s")
    max_heals: int = Field(2, ge=0, description="hangs healed by a restart; the next one fails the run")
    nccl_over_tcp: bool = Field(
        False,
        description="a multi-node GPU run on a worker group with EFA goes on when NCCL did not choose EFA "
        "(train/control/nccl_transport.py); false: it stops at its start, naming what NCCL chose",
    )
    # Tracking (rank 0)
    progress_every_s: float = Field(20.0, ge=0, description="a progress line at most this often; 0: none")
    tensorboard: bool = Field(True, description="TensorBoard event files in the run directory")
    mlflow_tracking_uri: str | None = Field(None, description="default: $MLFLOW_TRACKING_URI; neither: no MLflow")
    mlflow_experiment: str = Field("rayfleet", min_length=1)

    @field_validator("storage")
    @classmethod
    def _absolute_storage(cls, value: str) -> str:
        """Local storage as an absolute path (Ray workers run elsewhere); s3:// as given; nothing else."""
        if "://" in value:
            if not value.startswith("s3://"):
                raise ValueError(f"only local paths and s3:// are supported (got {value!r})")
            if not value.removeprefix("s3://").strip("/"):
                raise ValueError("s3:// needs a bucket, as in s3://bucket/prefix")
            return value.rstrip("/")
        return str(Path(value).expanduser().resolve())

    @property
    def fewest_workers(self) -> int:
        return self.min_workers or self.num_workers

    @property
    def elastic(self) -> bool:
        return self.fewest_workers < self.num_workers

    @model_validator(mode="after")
    def _check_workers(self) -> JobConfig:
        if self.min_workers is not None and self.min_workers > self.num_workers:
            raise ValueError(f"min_workers: {self.min_workers} is more than num_workers ({self.num_workers})")
        return self

    @model_validator(mode="after")
    def _check_storage(self) -> JobConfig:
        if self.s3_endpoint_url and not self.storage.startswith("s3://"):
            raise ValueError("s3_endpoint_url: only meaningful with an s3:// storage")
        if self.s3_endpoint_url and not self.s3_endpoint_url.startswith(("http://", "https://")):
            raise ValueError(f"s3_endpoint_url: must start with http:// or https:// (got {self.s3_endpoint_url!r})")
        return self
