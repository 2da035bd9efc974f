"""What the FSDP job reports about its steps: the metrics row (loss, tokens/s, TFLOP/s, MFU), the progress
line, its scalars for tracking, and the end-of-run summary."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from rayfleet.train.fsdp_config import FSDPConfig
from rayfleet.train.tracking.scalars import memory_gb


def step_metrics(cfg, model_info, loss_sum, tokens, seconds, device, world) -> dict:
    packed = torch.tensor([loss_sum, tokens], dtype=torch.float64, device=device)
    dist.all_reduce(packed)
    loss = packed[0].item() / (world * cfg.grad_accum * model_info["steps"])
    tokens_per_s = packed[1].item() / seconds
    tflops = tokens_per_s / world * model_info["flops_per_token"] / 1e12
    peak = model_info["peak"]
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    return {
        "loss": loss,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_device": tokens_per_s / world,
        "tflops_per_device": tflops,
        "mfu": tflops / peak if peak else None,
        "peak_memory_gib": memory,
    }


def progress_line(row: dict, max_steps: int) -> str:
    mfu = f"  MFU {row['mfu']:.1%}" if row["mfu"] is not None else ""
    return (
        f"step {row['step']}/{max_steps}  loss {row['loss']:.4f}  lr {row['lr']:.2e}  "
        f"{row['tokens_per_s']:,.0f} tok/s  {row['tflops_per_device']:.2f} TFLOP/s/device{mfu}"
    )


def window(loss_sum: float, tokens: int, started: float, steps: int, cfg: FSDPConfig) -> dict[str, str]:
    """The progress line's values: this rank's loss and token rate since the last logged step."""
    seconds = max(time.perf_counter() - started, 1e-9)
    return {"loss": f"{loss_sum / max(steps * cfg.grad_accum, 1):.4f}", "tok/s/device": f"{tokens / seconds:,.0f}"}


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
