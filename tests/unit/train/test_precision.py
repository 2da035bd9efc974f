"""The one precision decision."""

from __future__ import annotations

import pytest
import torch

from rayfleet.train import precision
from rayfleet.train.precision import wants_bf16


@pytest.mark.parametrize(
    ("choice", "device", "native_cpu", "bf16"),
    [
        ("auto", "cuda", False, True),
        ("auto", "cpu", False, False),
        ("auto", "cpu", True, True),
        ("bf16", "cpu", False, True),
        ("fp32", "cuda", False, False),
        ("fp32", "cpu", True, False),
    ],
)
def test_wants_bf16(monkeypatch, choice, device, native_cpu, bf16):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native_cpu)
    assert wants_bf16(choice, torch.device(device)) is bf16


@pytest.mark.parametrize(
    ("flags", "native"), [("fma avx2", False), ("avx2 avx512f avx512_bf16", True), ("amx_bf16", True)]
)
def test_native_bf16_is_read_from_the_cpu_flags(monkeypatch, tmp_path, flags, native):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: fpu {flags}\n\nprocessor\t: 1\nflags\t\t: fpu {flags}\n")
    original = precision.Path
    monkeypatch.setattr(precision, "Path", lambda p: original(cpuinfo) if p == "/proc/cpuinfo" else original(p))
    precision.cpu_has_native_bf16.cache_clear()
    try:
        assert precision.cpu_has_native_bf16() is native
    finally:
        precision.cpu_has_native_bf16.cache_clear()
