"""A sum over every rank of the DDP job (a collective), for its epoch totals."""

from __future__ import annotations

import torch
import torch.distributed as dist


def all_sum(*values: torch.Tensor | float, device: torch.device) -> list[float]:
    packed = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device) for v in values])
    dist.all_reduce(packed)
    return packed.tolist()
