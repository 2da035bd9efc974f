"""The FSDP job's pure pieces: packing, step-addressed batches, the LR schedule, FLOPs, config checks."""

from __future__ import annotations

import pytest
import torch

from training.config import ConfigError, load_config
from training.data.text import PackedBlocks, pack
from training.flops import flops_per_token, peak_tflops
from training.fsdp import lr_at
from training.fsdp_config import FSDPConfig


def cfg(*overrides: str) -> FSDPConfig:
    return load_config(FSDPConfig, "training/configs/fsdp.yaml", list(overrides))


def test_packing_has_no_padding_and_the_right_block_count():
    ids = list(range(1, 1001))
    blocks = pack(ids, 64)
    assert blocks.shape == (1000 // 64, 64)
    assert torch.equal(blocks.flatten(), torch.tensor(ids[: 15 * 64]))  # every position a real token, in order
    with pytest.raises(ValueError, match="fewer than one block"):
        pack(ids[:10], 64)


def test_micro_batches_are_a_pure_function_of_the_step_and_disjoint_across_ranks():
    data = PackedBlocks(pack(list(range(40 * 8)), 8))  # 40 blocks
    args = {"seed": 0, "micro_batch": 2, "grad_accum": 2}

    def batch(step, micro, rank):
        return data.micro_batch(step, micro, rank, 2, args["seed"], args["micro_batch"], args["grad_accum"])

    assert data.steps_per_epoch(2, 2, 2) == 5
    epoch0 = torch.cat([batch(s, m, r)[:, 0] for s in range(5) for m in range(2) for r in range(2)])
    assert epoch0.unique().numel() == 40  # one epoch touches every block exactly once
    assert torch.equal(batch(3, 1, 0), batch(3, 1, 0))  # a resumed run sees the same batch
    assert not torch.equal(batch(0, 0, 0), batch(5, 0, 0))  # the next epoch is reshuffled


def test_lr_warms_up_then_decays_by_cosine_to_the_floor():
    c = cfg("lr=0.001", "warmup_steps=10", "max_steps=110", "min_lr_ratio=0.1")
    assert lr_at(c, 0) == pytest.approx(1e-4) and lr_at(c, 9) == pytest.approx(1e-3)
    assert lr_at(c, 60) == pytest.approx(0.55e-3)  # half way down the cosine
    assert lr_at(c, 110) == pytest.approx(1e-4) and lr_at(c, 500) == pytest.approx(1e-4)


def test_flops_and_peaks():
    # pythia-1.4b-like: 24 layers, 16 heads x 128, 1.21e9 non-embedding params, seq 2048
    assert flops_per_token(1.21e9, 24, 16, 128, 2048) == pytest.approx(6 * 1.21e9 + 12 * 24 * 16 * 128 * 2048)
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.4 and peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA A10G") is None and peak_tflops("cpu") is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["global_batch_size=30"], "global_batch_size: 30 cannot be split across 8 workers"),
        (["warmup_steps=200", "max_steps=100"], "warmup_steps: 200 must be below max_steps"),
        (["strategy=zero"], "strategy: Input should be 'fsdp' or 'deepspeed'"),
        (["seq_len=4"], "seq_len: Input should be greater than or equal to 8"),
        (["s3_endpoint_url=http://x"], "s3_endpoint_url: only meaningful with an s3:// storage"),
    ],
)
def test_config_rejections(overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg(*overrides)


def test_model_dir_from_a_path_or_the_preloaded_model_dir(tmp_path, monkeypatch):
    from training.hf_model import ModelNotFound, resolve_model_dir

    preloaded = tmp_path / "models" / "databricks" / "dolly-v2-7b"
    preloaded.mkdir(parents=True)
    monkeypatch.setenv("MODEL_DIR", str(tmp_path / "models"))
    assert resolve_model_dir("databricks/dolly-v2-7b") == preloaded  # the trainer image's /models
    assert resolve_model_dir(str(preloaded)) == preloaded
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="neither a directory, nor under \\$MODEL_DIR"):
        resolve_model_dir("nobody/no-such-model")
