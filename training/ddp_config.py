"""The DDP job's config: defaults equal the original AWS blueprint (Adam 1e-3, 128/worker, 10 epochs, 2 workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from training.config import JobConfig
from training.data.layout import missing_files


def absolute_storage(cls, value: str) -> str:
    """Local storage as an absolute path (Ray workers run elsewhere); s3:// as given; nothing else."""
    if "://" in value:
        if not value.startswith("s3://"):
            raise ValueError(f"only local paths and s3:// are supported (got {value!r})")
        return value.rstrip("/")
    return str(Path(value).expanduser().resolve())


class DDPConfig(JobConfig):
    # Cluster shape
    num_workers: int = Field(2, ge=1, description="Ray Train workers (one process, one GPU each on GPU)")
    cpus_per_worker: float = Field(1.0, gt=0)
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when the cluster has GPUs")
    # Optimization
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(128, ge=1, description="per worker")
    lr: float = Field(1e-3, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0)
    seed: int = Field(0, ge=0)
    augment: bool = Field(False, description="random horizontal flips, on the device")
    # Speed knobs, GPU only (ignored on CPU, which runs fp32 eager)
    precision: Literal["auto", "bf16", "fp32"] = "auto"
    channels_last: bool = True
    compile: bool = Field(False, description="torch.compile the model (CUDA graphs with compile_mode)")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"
    # Data
    data_dir: str = Field("data", description="dataset root; FashionMNIST/raw/*-ubyte below it")
    download: bool = Field(False, description="download the real FashionMNIST into data_dir if missing")
    train_subset: int | None = Field(None, ge=1, description="use only the first N training images")
    test_subset: int | None = Field(None, ge=1, description="evaluate on the first N test images only")
    eval_batch_size: int = Field(1024, ge=1)
    # Storage and fault tolerance
    storage: str = Field("runs", description="a local directory or s3://bucket/prefix")
    s3_endpoint_url: str | None = Field(None, description="for S3-compatible stores (MinIO, moto)")
    run_name: str | None = Field(None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
    max_failures: int = Field(3, ge=0, description="worker-group restarts, each resuming from the last checkpoint")
    keep_checkpoints: int = Field(2, ge=1)

    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, value: str) -> str:
        return str(Path(value).expanduser().resolve())  # Ray workers run in another directory

    _absolute_storage = field_validator("storage")(absolute_storage)

    @model_validator(mode="after")
    def _check(self) -> DDPConfig:
        if not self.download and missing_files(Path(self.data_dir)):
            raise ValueError(
                f"data_dir: {self.data_dir} has no FashionMNIST files ({', '.join(missing_files(Path(self.data_dir)))} "
                "missing); run `make data` to generate a synthetic set, or set download=true"
            )
        if self.s3_endpoint_url and not self.storage.startswith("s3://"):
            raise ValueError("s3_endpoint_url: only meaningful with an s3:// storage")
        if self.s3_endpoint_url and not self.s3_endpoint_url.startswith(("http://", "https://")):
            raise ValueError(f"s3_endpoint_url: must start with http:// or https:// (got {self.s3_endpoint_url!r})")
        if self.storage.startswith("s3://") and len(self.storage) <= len("s3://"):
            raise ValueError("storage: s3:// needs a bucket, as in s3://bucket/prefix")
        return self
