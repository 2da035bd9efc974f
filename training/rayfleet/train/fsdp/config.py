"""The FSDP job's config: a causal LM fine-tuned on packed text, sharded with FSDP2."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from rayfleet.train.job_config import JobConfig


class FSDPConfig(JobConfig):
    strategy: Literal["fsdp", "deepspeed"] = Field("fsdp", description="FSDP2, or DeepSpeed ZeRO-3")
    # Model and data
    model: str = Field("databricks/dolly-v2-7b", description="Hub id or local directory; $MODEL_DIR/<id> first")
    data: str = Field("data/text/tiny_shakespeare.txt", description="text file, s3://bucket/key or hf://repo/file")
    seq_len: int = Field(1024, ge=8, description="packed block length (256 for parity with the blueprint)")
    # Optimization
    micro_batch_size: int = Field(1, ge=1, description="blocks per worker per step")
    grad_accum: int = Field(1, ge=1)
    global_batch_size: int | None = Field(None, ge=1, description="if set: must equal micro x accum x workers")
    lr: float = Field(2e-5, gt=0, le=1)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(20, ge=0)
    max_steps: int = Field(200, ge=1)
    stop_at_step: int | None = Field(None, ge=1, description="end this invocation after this step (checkpointed)")
    weight_decay: float = Field(0.0, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    # Speed and memory
    activation_checkpointing: bool = True
    compile: bool = False
    reshard_after_forward: bool | None = Field(
        None,
        description="FSDP2: free each block's gathered parameters after its forward and gather them again in "
        "backward (less memory, more all-gathers); null: parallel.py's choice (only with more than one worker)",
    )
    # Checkpoints, metrics, export
    checkpoint_every: int = Field(50, ge=1, description="steps; also at the end")
    async_checkpoint: bool = Field(
        True, description="FSDP2: the loop waits only while a checkpoint is copied to CPU memory; written after"
    )
    log_every: int = Field(10, ge=1)
    export: bool = Field(True, description="write a consolidated Hugging Face folder at the end")

    @field_validator("data")
    @classmethod
    def _absolute_data(cls, value: str) -> str:
        return value if "://" in value else str(Path(value).expanduser().resolve())  # workers run elsewhere

    @model_validator(mode="after")
    def _check(self) -> FSDPConfig:
        per_step = self.micro_batch_size * self.grad_accum * self.num_workers
        if self.elastic and self.strategy == "deepspeed":
            raise ValueError(
                f"min_workers: {self.fewest_workers} makes the run elastic, but a DeepSpeed ZeRO-3 checkpoint loads "
                "only at the world size that wrote it: elastic workers are for strategy=fsdp"
            )
        if self.global_batch_size is not None and self.elastic:
            raise ValueError(
                f"global_batch_size: with elastic workers ({self.fewest_workers}-{self.num_workers}) the batch per "
                "step follows the world size; set micro_batch_size and grad_accum instead"
            )
        if self.global_batch_size is not None and self.global_batch_size != per_step:
            raise ValueError(
                f"global_batch_size: {self.global_batch_size} cannot be split across {self.num_workers} workers "
                f"x grad_accum {self.grad_accum} x micro_batch_size {self.micro_batch_size} (= {per_step})"
            )
        if self.warmup_steps >= self.max_steps:
            raise ValueError(f"warmup_steps: {self.warmup_steps} must be below max_steps ({self.max_steps})")
        return self
