"""The FSDP job's LR schedule."""

from __future__ import annotations

import pytest

from rayfleet.core.config import load_config
from rayfleet.train.fsdp import lr_at
from rayfleet.train.fsdp_config import FSDPConfig


def cfg(*overrides: str) -> FSDPConfig:
    return load_config(FSDPConfig, "rayfleet/train/configs/fsdp.yaml", list(overrides))


def test_lr_warms_up_then_decays_by_cosine_to_the_floor():
    c = cfg("lr=0.001", "warmup_steps=10", "max_steps=110", "min_lr_ratio=0.1")
    assert lr_at(c, 0) == pytest.approx(1e-4) and lr_at(c, 9) == pytest.approx(1e-3)
    assert lr_at(c, 60) == pytest.approx(0.55e-3)  # half way down the cosine
    assert lr_at(c, 110) == pytest.approx(1e-4) and lr_at(c, 500) == pytest.approx(1e-4)
