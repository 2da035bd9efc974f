"""The one precision decision."""

from __future__ import annotations

import pytest
import torch

from training.precision import wants_bf16


@pytest.mark.parametrize(
    ("precision", "device", "bf16"),
    [("auto", "cuda", True), ("auto", "cpu", False), ("bf16", "cpu", True), ("fp32", "cuda", False)],
)
def test_wants_bf16(precision, device, bf16):
    assert wants_bf16(precision, torch.device(device)) is bf16
