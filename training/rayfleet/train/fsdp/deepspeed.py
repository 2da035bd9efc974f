"""DeepSpeed ZeRO-3 as a training strategy: the same model, data, loop and checkpoint directories as FSDP2.

The DeepSpeed config is generated from the job's typed config (`deepspeed_config`). With ZeRO-3 announced
to transformers (HfDeepSpeedConfig) before loading, `from_pretrained` creates every parameter already
partitioned, so no rank holds the full model. Checkpoints are DeepSpeed's own per-rank partition files,
reported by every rank into the run's `checkpoint_step_<step>` directory like FSDP's, and read back
weights-only (rayfleet.train.checkpoint.deepspeed). Runs on CUDA (NCCL)
and, for tests and laptops, on CPU (gloo).
"""

from __future__ import annotations

from pathlib import Path

import torch

from rayfleet.train import checkpoint
from rayfleet.train.precision import wants_bf16

TAG = "state"


def deepspeed_config(cfg, bf16: bool) -> dict:
    return {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.grad_accum,
        "gradient_clipping": cfg.grad_clip,
        "optimizer": {
            "type": "AdamW",
            # torch's own AdamW (foreach) instead of DeepSpeed's FusedAdam: that one is compiled at first use
            # in every fresh container (3 minutes of C++ on a CPU; nvcc needed on a GPU), for a step that
            # is not the bottleneck of a ZeRO-3 run.
            "params": {"lr": cfg.lr, "betas": [0.9, 0.95], "weight_decay": cfg.weight_decay, "torch_adam": True},
        },
        "bf16": {"enabled": bf16},
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "stage3_gather_16bit_weights_on_model_save": True,  # the export's consolidated state dict
        },
        "activation_checkpointing": {"partition_activations": False},
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def skip_unused_cpu_ops(device: torch.device) -> None:
    """On a CPU, DeepSpeed's first process group probes every op builder (compiler subprocesses) and JIT-builds
    a shared-memory all-reduce op in C++: 30 s on an idle 2-core machine, minutes under load, in every fresh
    process whose cache is empty (each new container). Only inference_all_reduce uses that op, never training,
    and nothing else reads the compatibility table, so an empty table skips both. DeepSpeed keeps the table in
    its module so that edits to it persist (deepspeed/ops/__init__.py)."""
    if device.type == "cpu":
        import deepspeed.ops

        vars(deepspeed.ops).setdefault("__compatible_ops__", {})


class DeepSpeedStrategy:
    def __init__(self, cfg, model_dir: Path, device: torch.device, rank: int):
        import deepspeed
        from transformers import AutoModelForCausalLM
        from transformers.integrations import HfDeepSpeedConfig

        from rayfleet.train.checkpoint.deepspeed import use_weights_only_loads

        self.cfg, self.rank = cfg, rank
        self.bf16 = wants_bf16(cfg.precision, device)
        self.ds_config = deepspeed_config(cfg, self.bf16)
        skip_unused_cpu_ops(device)
        # Ray Train already set up torch.distributed (gloo or NCCL); DeepSpeed joins that process group.
        deepspeed.init_distributed(dist_backend=torch.distributed.get_backend())
        self._hf_ds = HfDeepSpeedConfig(self.ds_config)  # must stay alive: from_pretrained partitions under it
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        if cfg.activation_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        # Partitioned parameters report their full size as ds_numel.
        embeddings = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        self.non_embedding_params = sum(
            getattr(p, "ds_numel", p.numel()) for p in model.parameters() if id(p) not in embeddings
        )
        self.engine, self.optimizer, _, _ = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=self.ds_config
        )
        # A resume unpickles the run's storage on every rank: weights-only, never DeepSpeed's arbitrary load.
        use_weights_only_loads(self.engine)

    @property
    def config(self):
        return self.engine.module.config

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def micro_step(self, batch: torch.Tensor) -> torch.Tensor:
        """Forward and backward of one micro-batch; its loss, on the device (as FSDPStrategy: no sync)."""
        loss = self.engine(input_ids=batch, labels=batch, use_cache=False).loss  # training needs no KV cache
        self.engine.backward(loss)  # scaled by 1/grad_accum inside
        self.engine.step()  # steps the optimizer only at the accumulation boundary
        return loss.detach()

    def step(self) -> torch.Tensor | float | None:
        """The gradient norm as DeepSpeed keeps it (a tensor or a number; None before its first step), read at
        logged steps."""
        norm = self.engine.get_global_grad_norm()
        return norm.detach() if isinstance(norm, torch.Tensor) else norm

    def local_param_bytes(self) -> int:
        return sum(p.ds_tensor.numel() * p.ds_tensor.element_size() for p in self.engine.module.parameters())

    def save(self, step: int, train_state: dict, metrics: dict, *, blocking: bool = True) -> None:
        """Always written and reported before it returns (`blocking` is FSDPStrategy's choice)."""

        def write(directory: Path) -> None:
            self.engine.save_checkpoint(str(directory), tag=TAG)  # every rank writes its own partitions
            if self.rank == 0:
                checkpoint.write_train_state(directory, {**train_state, "step": step})

        checkpoint.report(metrics, checkpoint.step_checkpoint_name(step), write)

    def prime_checkpoints(self) -> None:
        """Checkpoints are synchronous here: nothing to allocate ahead."""

    def finish_checkpoint(self, wait: bool = True) -> dict:
        """Nothing is ever written in the background here."""
        return {}

    def close(self) -> None:
        pass

    def load(self) -> dict | None:
        """The newest complete checkpoint's partitions (checkpoint.latest); its train state with `resumed_from`
        (the checkpoint's name) added, or None."""
        with checkpoint.latest(required=[checkpoint.TRAIN_STATE]) as directory:
            if directory is None:
                return None
            self.engine.load_checkpoint(str(directory), tag=TAG)
            return {**checkpoint.read_train_state(directory), "resumed_from": directory.name}

    @torch.no_grad()
    def gather_for_export(self, probe: torch.Tensor) -> tuple[dict, torch.Tensor]:
        from transformers.integrations.deepspeed import unset_hf_deepspeed_config

        full = self.engine._zero3_consolidated_16bit_state_dict()  # collective; the dict on rank 0 only
        self.engine.eval()
        logits = self.engine(input_ids=probe, use_cache=False).logits.float()  # no KV cache, as in training
        self.engine.train()
        # From here on, from_pretrained (rank 0 reloading the export) must be a plain load, not a
        # collective ZeRO-3 one that the other ranks would never join.
        unset_hf_deepspeed_config()
        return full or {}, logits
