"""The DDP job's config: defaults equal the original AWS blueprint (Adam 1e-3, 128/worker, 10 epochs, 2 workers)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, field_validator, model_validator

from rayfleet.train.data.layout import missing_files
from rayfleet.train.job_config import JobConfig
from rayfleet.train.precision import wants_bf16


class DDPConfig(JobConfig):
    # Optimization
    epochs: int = Field(10, ge=1)
    batch_size: int = Field(128, ge=1, description="per worker")
    lr: float = Field(1e-3, gt=0, le=10)
    weight_decay: float = Field(0.0, ge=0)
    augment: bool = Field(False, description="random horizontal flips, on the device")
    # Speed knobs
    channels_last: bool = Field(True, description="NHWC activations and weights, on GPU")
    small_convs_as_gemm: bool | Literal["auto"] = Field(
        "auto", description="convolutions over maps of <= 4x4 pixels as matrix products; auto: on CPU"
    )
    grad_compression: Literal["none", "bf16"] = Field(
        "none", description="bf16: all-reduce gradients in bf16 (half the bytes; for TCP networks)"
    )
    bucket_cap_mb: float = Field(25.0, gt=0, description="DDP gradient bucket size")
    compile: bool = Field(False, description="torch.compile the model (CUDA graphs with compile_mode)")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"
    # Data
    data_dir: str = Field(
        "data", description="dataset root (FashionMNIST/raw/*-ubyte below it), or a staged s3:// copy of one"
    )
    download: bool = Field(False, description="download the real FashionMNIST into data_dir if missing")
    train_subset: int | None = Field(None, ge=1, description="use only the first N training images")
    test_subset: int | None = Field(None, ge=1, description="evaluate on the first N test images only")
    eval_batch_size: int = Field(1024, ge=1)
    # Tracking
    log_every_steps: int = Field(50, ge=1, description="rank 0's step loss to TensorBoard/MLflow every N steps")

    @field_validator("data_dir")
    @classmethod
    def _absolute_data_dir(cls, value: str) -> str:
        if value.startswith("s3://"):  # a staged copy (rayfleet/recipes/stage.py): each node copies it
            return value.rstrip("/")
        return str(Path(value).expanduser().resolve())  # Ray workers run in another directory

    @model_validator(mode="after")
    def _check(self) -> DDPConfig:
        if not self.download and not self.data_dir.startswith("s3://") and missing_files(Path(self.data_dir)):
            raise ValueError(
                f"data_dir: {self.data_dir} has no FashionMNIST files ({', '.join(missing_files(Path(self.data_dir)))} "
                "missing); run `make data` to generate a synthetic set, or set download=true"
            )
        return self


@dataclass(frozen=True)
class Runtime:
    """What the device makes of the config: bf16 where the device computes it natively; on GPU channels_last;
    on CPU the small convolutions as matrix products (oneDNN is slow on 1-4 pixel maps; cuDNN is not) and
    NCHW, which measured faster than channels_last around them (bench/vs_blueprint.py)."""

    device: torch.device
    amp_dtype: torch.dtype | None
    channels_last: bool
    small_convs_as_gemm: bool = False

    @classmethod
    def resolve(cls, cfg: DDPConfig, device: torch.device) -> Runtime:
        bf16 = wants_bf16(cfg.precision, device)
        gemm = cfg.small_convs_as_gemm is True or (cfg.small_convs_as_gemm == "auto" and device.type == "cpu")
        return cls(device, torch.bfloat16 if bf16 else None, cfg.channels_last and device.type == "cuda", gemm)

    def autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
