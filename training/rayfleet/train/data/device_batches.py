"""Batches cut on the training device from a split held there as uint8.

No DataLoader, no worker processes, no PIL: per step the device gathers a batch of indices, converts it
to float, normalizes (and optionally flips) it. Every epoch has its own permutation (rayfleet.train.data.order), the
same on every rank and after a resume; each rank takes its own equal, strided shard of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from rayfleet.train.data.fashion_mnist import Split
from rayfleet.train.data.order import epoch_shard

MEAN, STD = 0.2860, 0.3530  # FashionMNIST training-set statistics


def normalize(images: torch.Tensor) -> torch.Tensor:
    """uint8 pixels [N, 1, 28, 28] -> the model's input: what training, evaluation and serving all feed it."""
    return images.float().div_(255.0).sub_(MEAN).div_(STD)


class DeviceSplit:
    def __init__(self, split: Split, device: torch.device, channels_last: bool = False):
        self.images = split.images.to(device).unsqueeze(1)  # uint8 [N, 1, 28, 28]
        self.labels = split.labels.to(device)
        self.device = device
        self.channels_last = channels_last

    def __len__(self) -> int:
        return self.labels.numel()

    def shard_indices(self, epoch: int, rank: int, world: int, seed: int, shuffle: bool, skip: int = 0) -> torch.Tensor:
        if shuffle:
            return epoch_shard(len(self), epoch, rank, world, seed, skip).to(self.device)
        return torch.arange(rank, len(self), world, device=self.device)  # evaluation: every image exactly once

    def batches(
        self,
        indices: torch.Tensor,
        batch_size: int,
        augment: bool = False,
        drop_last: bool = False,
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        stop = len(indices) - (len(indices) % batch_size if drop_last else 0)
        for start in range(0, stop, batch_size):
            idx = indices[start : start + batch_size]
            x = normalize(self.images.index_select(0, idx))
            if augment:
                flip = torch.rand(x.shape[0], device=x.device) < 0.5
                x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            yield x, self.labels.index_select(0, idx)


def steps_per_epoch(n: int, world: int, batch_size: int) -> int:
    return -(-(n // world) // batch_size)
