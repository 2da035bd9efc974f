"""FLOPs per token and GPU peaks, for MFU."""

from __future__ import annotations

import pytest

from rayfleet.train.flops import flops_per_token, peak_tflops


def test_flops_and_peaks():
    # pythia-1.4b-like: 24 layers, 16 heads x 128, 1.21e9 non-embedding params, seq 2048
    assert flops_per_token(1.21e9, 24, 16, 128, 2048) == pytest.approx(6 * 1.21e9 + 12 * 24 * 16 * 128 * 2048)
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.4 and peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA A10G") is None and peak_tflops("cpu") is None
