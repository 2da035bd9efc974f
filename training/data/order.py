"""Per-epoch sample order shared by the jobs: a permutation from (seed, epoch), strided across ranks.

Every rank computes the same permutation without talking to the others, a resumed run recomputes it, and
all shards have the same length (the tail of fewer than `world` samples waits for the next epoch).
"""

from __future__ import annotations

import torch


def epoch_shard(n: int, epoch: int, rank: int, world: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=gen)
    per_rank = n // world
    return order[rank : per_rank * world : world]
