"""Per-epoch sample order shared by the jobs: a permutation from (seed, epoch), strided across ranks.

Every rank computes the same permutation without talking to the others, a resumed run recomputes it, and
all shards have the same length (the tail of fewer than `world` samples waits for the next epoch).

Strided shards consume the permutation as a prefix: after k full batches of b on each of `world` ranks the
epoch has used exactly its first k*b*world samples, whatever the ranks. A run preempted mid-epoch resumes
with `skip` = that count, on the same or another number of ranks, and sees each remaining sample once.
"""

from __future__ import annotations

import torch


def epoch_shard(n: int, epoch: int, rank: int, world: int, seed: int, skip: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=gen)[skip:]
    per_rank = len(order) // world
    return order[rank : per_rank * world : world]
