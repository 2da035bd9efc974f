"""Parallelism in one place: `parallelize()` owns the order, torchtitan's: activation checkpointing, then
compile, then data parallelism (DDP) or sharding (FSDP2). Checkpointing wraps the plain blocks; compiling
before wrapping keeps the communication hooks outside the compiled graphs. The jobs call `parallelize`
only; the small `apply_*` steps are its parts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch.nn.parallel import DistributedDataParallel


def parallelize(
    model: torch.nn.Module,
    device: torch.device,
    data_parallel: Literal["ddp", "fsdp"],
    *,
    blocks: Sequence[torch.nn.Module] = (),
    activation_checkpointing: bool = False,
    compile_mode: str | None = None,
    bf16: bool = False,
    grad_compression: Literal["none", "bf16"] = "none",
    bucket_cap_mb: float | None = None,
) -> torch.nn.Module:
    """Apply AC (to `blocks`), then compile (the whole model for DDP, each block for FSDP2), then DDP or
    FSDP2 sharding (bf16 parameters, fp32 reduction when `bf16`); DDP may all-reduce its gradients in bf16
    (`grad_compression`) in buckets of `bucket_cap_mb`. Returns the module to train: the DDP
    wrapper (its `.module` is the compiled model, for evaluation) or the sharded model itself."""
    if activation_checkpointing:
        apply_activation_checkpointing(list(blocks))
    if data_parallel == "fsdp":
        if compile_mode:
            apply_compile_per_block(list(blocks))
        apply_fsdp(model, list(blocks), device, bf16)
        return model
    compiled = apply_compile(model, compile_mode) if compile_mode else model
    return apply_ddp(compiled, device, grad_compression, bucket_cap_mb)


def apply_compile(model: torch.nn.Module, mode: str) -> torch.nn.Module:
    # "reduce-overhead" records CUDA graphs: for a small CNN at batch 128, launch overhead dominates.
    return torch.compile(model, mode=mode)


def apply_ddp(
    model: torch.nn.Module,
    device: torch.device,
    grad_compression: Literal["none", "bf16"] = "none",
    bucket_cap_mb: float | None = None,
) -> DistributedDataParallel:
    device_ids = [device.index] if device.type == "cuda" else None
    # gradient_as_bucket_view saves one copy of the gradients; static_graph lets DDP skip unused-
    # parameter bookkeeping after the first step (the ResNet graph never changes).
    ddp = DistributedDataParallel(
        model, device_ids=device_ids, gradient_as_bucket_view=True, static_graph=True, bucket_cap_mb=bucket_cap_mb
    )
    if grad_compression == "bf16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

        # Half the bytes per all-reduce: gradients are averaged in bf16, then copied back into fp32.
        ddp.register_comm_hook(None, bf16_compress_hook)
    return ddp


def broadcast_buffers(module: torch.nn.Module, src: int = 0) -> None:
    """Every rank takes rank `src`'s buffers (BatchNorm's running statistics). DDP broadcasts them at the
    start of each training forward, so after the last step each rank holds the statistics of its own last
    batch; without this each rank would evaluate a slightly different model from the one rank 0 saves."""
    import torch.distributed as dist

    for buffer in module.buffers():
        dist.broadcast(buffer, src)


def apply_activation_checkpointing(blocks: list[torch.nn.Module]) -> None:
    """Recompute each block's activations in the backward pass: memory for one block instead of all."""
    from torch.utils.checkpoint import checkpoint

    for block in blocks:
        original = block.forward

        # In place, so parameter names (and so checkpoints and exports) do not change.
        def forward(*args, _original=original, **kwargs):
            return checkpoint(_original, *args, use_reentrant=False, **kwargs)

        block.forward = forward


def apply_compile_per_block(blocks: list[torch.nn.Module]) -> None:
    for block in blocks:
        block.compile()  # in place, per block: small graphs compile fast and are reused across layers


def apply_fsdp(model: torch.nn.Module, blocks: list[torch.nn.Module], device: torch.device, bf16: bool) -> None:
    """FSDP2: one shard group per block and one for the root (embeddings, final norm, head).

    On GPU, parameters are gathered in bf16 and gradients reduced in fp32 (MixedPrecisionPolicy)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(device.type, (torch.distributed.get_world_size(),))
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    kwargs = {"mesh": mesh, **({"mp_policy": policy} if policy else {})}
    # On one device nothing is sharded, so freeing each block's gathered parameters after its forward saves
    # no memory and costs a second gather in the backward pass.
    sharded = torch.distributed.get_world_size() > 1
    for index, block in enumerate(blocks):
        # The last block's parameters are needed again at once by the backward pass: keep them gathered.
        fully_shard(block, reshard_after_forward=sharded and index < len(blocks) - 1, **kwargs)
    fully_shard(model, **kwargs)
