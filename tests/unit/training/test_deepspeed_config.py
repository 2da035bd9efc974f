"""The DeepSpeed config generated from the job's typed config."""

from __future__ import annotations

from training.deepspeed_strategy import deepspeed_config
from training.fsdp_config import FSDPConfig


def test_zero3_with_torchs_adamw_so_no_optimizer_is_compiled_at_start():
    cfg = FSDPConfig(model="m", data="d", strategy="deepspeed", micro_batch_size=4, grad_accum=2, lr=1e-3)
    ds = deepspeed_config(cfg, bf16=False)
    assert ds["zero_optimization"]["stage"] == 3
    assert ds["train_micro_batch_size_per_gpu"] == 4 and ds["gradient_accumulation_steps"] == 2
    assert ds["optimizer"]["type"] == "AdamW" and ds["optimizer"]["params"]["lr"] == 1e-3
    # DeepSpeed's FusedAdam is JIT-compiled in every fresh container (minutes); torch's AdamW is not.
    assert ds["optimizer"]["params"]["torch_adam"] is True
    assert ds["bf16"] == {"enabled": False} and deepspeed_config(cfg, bf16=True)["bf16"] == {"enabled": True}
