"""What the FSDP job reports about its steps: the metrics row (loss, tokens/s, TFLOP/s, MFU), the progress
line, its scalars for tracking, and the end-of-run summary."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from rayfleet.train.fsdp.config import FSDPConfig
from rayfleet.train.tracking.scalars import memory_gb


def step_metrics(cfg, model_info, loss_sum, tokens, seconds, device, world, grad_norm=None) -> dict:
    """A logged step's metrics, every rank (a collective). `loss_sum` (this rank's window) and `grad_norm` (the
    last step's) may be device tensors: the loop keeps them there so that no step waits for the device; they
    are read here, once: one all-reduce and one copy to the host."""
    packed = torch.stack([_scalar(loss_sum, device), _scalar(tokens, device)])
    dist.all_reduce(packed)
    if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2: its full value is a collective
        grad_norm = grad_norm.full_tensor()
    norm = _scalar(float("nan") if grad_norm is None else grad_norm, device)
    loss_total, token_total, norm_value = torch.cat([packed, norm.reshape(1)]).tolist()
    loss = loss_total / (world * cfg.grad_accum * model_info["steps"])
    tokens_per_s = token_total / seconds
    tflops = tokens_per_s / world * model_info["flops_per_token"] / 1e12
    peak = model_info["peak"]
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "grad_norm": norm_value,
        "loss": loss,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_device": tokens_per_s / world,
        "tflops_per_device": tflops,
        "mfu": tflops / peak if peak else None,
        "peak_memory_gib": memory,
    }


def _scalar(value, device: torch.device) -> torch.Tensor:
    """A number or a one-element tensor as a float64 scalar on `device` (no host copy)."""
    return torch.as_tensor(value, device=device).to(torch.float64).reshape(())


def progress_line(row: dict, max_steps: int) -> str:
    mfu = f"  MFU {row['mfu']:.1%}" if row["mfu"] is not None else ""
    return (
        f"step {row['step']}/{max_steps}  loss {row['loss']:.4f}  lr {row['lr']:.2e}  "
        f"{row['tokens_per_s']:,.0f} tok/s  {row['tflops_per_device']:.2f} TFLOP/s/device{mfu}"
    )


def window(loss_sum, tokens: int, started: float, steps: int, cfg: FSDPConfig) -> dict[str, str]:
    """The progress line's values: this rank's loss and token rate since the last logged step. `loss_sum` may
    be a device tensor: read here (one sync, at the progress line's own rate)."""
    seconds = max(time.perf_counter() - started, 1e-9)
    loss = float(loss_sum) / max(steps * cfg.grad_accum, 1)
    return {"loss": f"{loss:.4f}", "tok/s/device": f"{tokens / seconds:,.0f}"}


def step_scalars(row: dict, device: torch.device) -> dict[str, float]:
    """A logged step's scalars for TensorBoard and MLflow."""
    values = {
        "train/loss": row["loss"],
        "lr": row["lr"],
        "grad_norm": row["grad_norm"],
        "throughput/tokens_per_s": row["tokens_per_s"],
        "throughput/tflops_per_device": row["tflops_per_device"],
        "memory/peak_gb": memory_gb(device),
    }
    if row.get("mfu") is not None:
        values["mfu"] = row["mfu"]
    return values


def fsdp_summary(last: dict) -> list[str]:
    mfu = f"{last['mfu']:.1%}" if last.get("mfu") is not None else "n/a (no GPU peak known)"
    return [
        f"  steps           {last.get('step', '?')}",
        f"  loss            {last.get('loss', float('nan')):.4f}",
        f"  tokens/s        {last.get('tokens_per_s', float('nan')):,.0f} "
        f"({last.get('tokens_per_s_per_device', 0):,.0f}/device)",
        f"  MFU             {mfu}",
    ]
