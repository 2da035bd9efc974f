"""The one precision decision: what `precision: auto | bf16 | fp32` means on a device."""

from __future__ import annotations

import torch


def wants_bf16(precision: str, device: torch.device) -> bool:
    """auto means bf16 where the device computes it natively at full speed (CUDA), else fp32."""
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")
