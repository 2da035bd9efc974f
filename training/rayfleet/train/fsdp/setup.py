"""The FSDP loop's setup on each rank (rayfleet/train/fsdp/__init__.py run_loop): what the step metrics need of the
model, the checkpoints' staging memory made once, and rank 0's first line."""

from __future__ import annotations

import torch
import torch.distributed as dist

from rayfleet.train.data.text import PackedBlocks
from rayfleet.train.flops import flops_per_token, peak_tflops
from rayfleet.train.fsdp.config import FSDPConfig


def model_info(cfg: FSDPConfig, strategy, device: torch.device, device_name: str, world: int) -> dict:
    """What the step metrics need of the model: FLOPs per token, the device's peak, each rank's parameter
    bytes (an all-gather: every rank calls it), and the steps in the current logging window."""
    mc = strategy.config
    info = {
        "flops_per_token": flops_per_token(
            strategy.non_embedding_params,
            mc.num_hidden_layers,
            mc.num_attention_heads,
            mc.hidden_size // mc.num_attention_heads,
            cfg.seq_len,
        ),
        "peak": peak_tflops(device_name),
        "steps": 0,
    }
    local_bytes = torch.tensor([strategy.local_param_bytes()], dtype=torch.float64, device=device)
    shard_bytes = [torch.zeros_like(local_bytes) for _ in range(world)]
    dist.all_gather(shard_bytes, local_bytes)
    info["shard_bytes"] = [int(b.item()) for b in shard_bytes]
    return info


def prime_checkpoints(strategy, rank: int) -> None:
    seconds = strategy.prime_checkpoints()
    if seconds is not None and rank == 0:
        print(
            f"checkpoint staging memory ready in {seconds:.1f} s (once; each checkpoint then only copies)", flush=True
        )


def announce(
    cfg: FSDPConfig, run_name: str, what: str, trained_on: str, data: PackedBlocks, world: int, device_name: str
) -> None:
    print(
        f"{run_name}: {what} with {cfg.strategy} on {trained_on}; {len(data):,} blocks of {cfg.seq_len} tokens, "
        f"{data.steps_per_epoch(world, cfg.micro_batch_size, cfg.grad_accum)} steps/epoch, "
        f"{world} x {device_name}",
        flush=True,
    )
