"""The one precision decision: what `precision: auto | bf16 | fp32` means on a device."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import torch

NATIVE_BF16_CPU_FLAGS = {"avx512_bf16", "amx_bf16"}  # Linux /proc/cpuinfo names


def wants_bf16(precision: str, device: torch.device) -> bool:
    """auto means bf16 where the device computes it natively at full speed (CUDA, CPUs with AVX512-BF16 or
    AMX), else fp32: without those instructions a CPU emulates bf16, many times slower than fp32."""
    if precision != "auto":
        return precision == "bf16"
    return device.type == "cuda" or (device.type == "cpu" and cpu_has_native_bf16())


@cache
def cpu_has_native_bf16() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux: no way to tell, so the safe choice
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(NATIVE_BF16_CPU_FLAGS & set(flags))
