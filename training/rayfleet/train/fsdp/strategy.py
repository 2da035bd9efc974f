"""FSDP2 as a training strategy: meta-device build, per-block sharding, DCP checkpoints, gathered export."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

from rayfleet.train.checkpoint import sharded as sharded_checkpoint
from rayfleet.train.flops import non_embedding_params
from rayfleet.train.models.hf import (
    build_on_meta,
    checkpoint_key_renames,
    load_weights_from_rank0,
    materialize,
    transformer_blocks,
)
from rayfleet.train.parallel import parallelize
from rayfleet.train.precision import wants_bf16


class FSDPStrategy:
    """One rank's model, optimizer and checkpoints. `micro_step` and `step` return device tensors, never
    Python numbers: reading one is a host-device sync that stalls the kernel launches; the loop reads them
    at its logged steps only."""

    def __init__(self, cfg, model_dir: Path, device: torch.device, rank: int):
        self.cfg, self.rank = cfg, rank
        model = build_on_meta(model_dir)
        self.non_embedding_params = non_embedding_params(model)
        renames = checkpoint_key_renames(model)  # before sharding changes the class
        blocks = transformer_blocks(model)
        self.bf16 = wants_bf16(cfg.precision, device)
        parallelize(
            model,
            device,
            "fsdp",
            blocks=blocks,
            activation_checkpointing=cfg.activation_checkpointing,
            compile_mode="default" if cfg.compile else None,
            bf16=self.bf16,
        )
        if cfg.reshard_after_forward is not None:
            # Over parallel.py's choice (which frees them only with more than one worker): kept gathered, backward
            # skips a second all-gather for the gathered parameters' memory meanwhile. The last block stays
            # gathered either way: the backward pass needs it at once.
            for block in blocks[:-1]:
                block.set_reshard_after_forward(cfg.reshard_after_forward, recurse=False)
        materialize(model, device)
        load_weights_from_rank0(model, model_dir, rank, renames)
        self.model = model
        # fused: one kernel over all (sharded) parameters; 1.3x the tiny model's tokens/s on CPU (RESULTS.md).
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=cfg.weight_decay, fused=True
        )
        self.checkpoints = None
        if cfg.async_checkpoint and (why := sharded_checkpoint.async_supported()):
            if rank == 0:
                print(f"checkpoints are synchronous: {why}", flush=True)
        elif cfg.async_checkpoint:
            self.checkpoints = sharded_checkpoint.AsyncCheckpoints(device, rank)

    @property
    def config(self):
        return self.model.config

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def micro_step(self, batch: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one micro-batch; its loss, on the device."""
        loss = self.model(input_ids=batch, labels=batch, use_cache=False).loss  # training needs no KV cache
        (loss / self.cfg.grad_accum).backward()
        return loss.detach()

    def step(self) -> torch.Tensor:
        """The optimizer step; the gradient norm before clipping, on the device (a DTensor: its full value is
        a collective, read at logged steps on every rank)."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm.detach()

    def local_param_bytes(self) -> int:
        return sum(p.to_local().numel() * p.element_size() for p in self.model.parameters())

    def save(self, step: int, train_state: dict, metrics: dict, *, blocking: bool = False) -> None:
        """This step's checkpoint (every rank): started in the background (async_checkpoint) unless `blocking`,
        then written and reported before it returns. A checkpoint still being written is finished first."""
        if self.checkpoints is not None and not blocking:
            self.checkpoints.finish()
            self.checkpoints.start(step, self.model, self.optimizer, train_state, metrics)
            return
        self.finish_checkpoint()
        sharded_checkpoint.save(step, self.model, self.optimizer, train_state, metrics, self.rank)

    def prime_checkpoints(self) -> float | None:
        """Allocate the background checkpoints' staging memory now (after a first step): seconds, or None
        when checkpoints are synchronous."""
        return self.checkpoints.prime(self.model, self.optimizer) if self.checkpoints is not None else None

    def finish_checkpoint(self, wait: bool = True) -> dict:
        """Report the checkpoint being written in the background, if any (every rank, the same calls): after
        waiting for it, or without `wait` only when every rank has written it. Returns its metrics (see
        AsyncCheckpoints.finish) or {}."""
        if self.checkpoints is None:
            return {}
        return self.checkpoints.finish() if wait else self.checkpoints.finish_if_written()

    def close(self) -> None:
        """After the loop: the last checkpoint written and reported, its staging memory freed."""
        if self.checkpoints is not None:
            self.checkpoints.close()
            self.checkpoints = None

    def load(self) -> dict | None:
        return sharded_checkpoint.load_latest(self.model, self.optimizer)

    @torch.no_grad()
    def gather_for_export(self, probe: torch.Tensor) -> tuple[dict, torch.Tensor]:
        full = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        self.model.eval()
        # No KV cache, as in training: under compile its state made Dynamo recompile up to its limit.
        logits = self.model(input_ids=probe, use_cache=False).logits.float()
        self.model.train()
        return full, logits
