"""The DDP job's config: defaults equal the original AWS blueprint (Adam 1e-3, 128/worker, 10 epochs, 2 workers)."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from pydantic import Field, field_validator, model_validator

from rayfleet.train.data.layout import missing_files, resolve
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
        "auto",
        description="convolutions over maps of <= 4x4 pixels as matrix products; auto: on CPU, and on GPU with compile",
    )
    grad_compression: Literal["none", "bf16"] = Field(
        "none", description="bf16: all-reduce gradients in bf16 (half the bytes; for TCP networks)"
    )
    bucket_cap_mb: float = Field(25.0, gt=0, description="DDP gradient bucket size")
    compile: bool = Field(False, description="torch.compile the model (CUDA graphs with compile_mode)")
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"
    cuda_graph: bool | Literal["auto"] = Field(
        "auto",
        description="capture the whole step (forward, backward, all-reduce, Adam) as one CUDA graph; auto: on GPU",
    )
    async_checkpoint: bool = Field(
        True,
        description="the loop waits only while rank 0 writes an epoch's checkpoint to local disk; Ray Train "
        "uploads it from a thread and registers it once it is whole",
    )
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
        if self.cuda_graph is True and self.compile and self.compile_mode == "reduce-overhead":
            raise ValueError(
                "cuda_graph: the whole step is already one CUDA graph; compile_mode=reduce-overhead would "
                "capture the model again inside it (use compile_mode=default, or cuda_graph=false)"
            )
        local = None if self.data_dir.startswith("s3://") else resolve(Path(self.data_dir))
        if not self.download and local is not None and missing_files(local):
            raise ValueError(
                f"data_dir: {self.data_dir} has no FashionMNIST files ({', '.join(missing_files(local))} missing); "
                "run `make data` (the real set, or a generated one offline), or set download=true"
            )
        return self


@dataclass(frozen=True)
class Runtime:
    """What the device makes of the config: bf16 where the device computes it natively; on GPU channels_last
    and the whole step as one CUDA graph; on CPU the small convolutions as matrix products (oneDNN is slow on
    1-4 pixel maps) and NCHW, which measured faster than channels_last around them (bench/vs_blueprint.py).

    On GPU with torch.compile the small convolutions are matrix products too: layer4 sees 1x1 maps, whose
    [N, C, 1, 1] tensors are contiguous and channels_last at once, and Inductor's predicted stride of their
    weight gradient then sometimes disagrees with what cuDNN returns (an `assert_size_stride` failure on
    layer4's 512x512x3x3 gradient, seen on an H100). As matrix products no such layout question arises."""

    device: torch.device
    amp_dtype: torch.dtype | None
    channels_last: bool
    small_convs_as_gemm: bool = False
    cuda_graph: bool = False

    @classmethod
    def resolve(cls, cfg: DDPConfig, device: torch.device) -> Runtime:
        bf16 = wants_bf16(cfg.precision, device)
        cuda = device.type == "cuda"
        gemm = cfg.small_convs_as_gemm is True or (cfg.small_convs_as_gemm == "auto" and (not cuda or cfg.compile))
        graph_inside = cfg.compile and cfg.compile_mode == "reduce-overhead"  # compile's own graphs instead
        graph = cuda and (cfg.cuda_graph is True or (cfg.cuda_graph == "auto" and not graph_inside))
        return cls(device, torch.bfloat16 if bf16 else None, cfg.channels_last and cuda, gemm, graph)

    def autocast(self, cache: bool = True):
        """bf16 autocast where the device has it; `cache=False` inside a CUDA graph capture (a cached cast of
        a weight would be replayed stale after the optimizer updates the weight)."""
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype, cache_enabled=cache)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
