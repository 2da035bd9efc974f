"""Parallelism applied by small functions, in torchtitan's order: (activation checkpointing,) compile, then
data parallelism. Compiling the bare module before wrapping keeps DDP's communication hooks outside the
compiled graph."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel


def apply_compile(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    # "reduce-overhead" records CUDA graphs: for a small CNN at batch 128, launch overhead dominates.
    return torch.compile(model, mode=mode)


def apply_ddp(model: torch.nn.Module, device: torch.device) -> DistributedDataParallel:
    device_ids = [device.index] if device.type == "cuda" else None
    # gradient_as_bucket_view saves one copy of the gradients; static_graph lets DDP skip unused-
    # parameter bookkeeping after the first step (the ResNet graph never changes).
    return DistributedDataParallel(model, device_ids=device_ids, gradient_as_bucket_view=True, static_graph=True)
