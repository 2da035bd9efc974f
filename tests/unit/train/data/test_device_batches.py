"""The dataset held on the device: shards per rank and epoch, normalized batches, augmentation."""

from __future__ import annotations

import pytest
import torch

from rayfleet.train.data import fashion_mnist
from rayfleet.train.data.device_batches import MEAN, STD, DeviceSplit, steps_per_epoch


@pytest.fixture
def split(small_dataset) -> DeviceSplit:
    return DeviceSplit(fashion_mnist.load(small_dataset, train=True), torch.device("cpu"))


def test_shards_are_disjoint_equal_and_reshuffled_each_epoch(split):
    world = 3
    shards = [split.shard_indices(epoch=1, rank=r, world=world, seed=0, shuffle=True) for r in range(world)]
    assert len({len(s) for s in shards}) == 1  # equal: DDP's collectives stay in step
    together = torch.cat(shards)
    assert together.unique().numel() == together.numel() == (len(split) // world) * world
    again = split.shard_indices(epoch=1, rank=0, world=world, seed=0, shuffle=True)
    assert torch.equal(again, shards[0])  # same (seed, epoch): same order, also after a resume
    next_epoch = split.shard_indices(epoch=2, rank=0, world=world, seed=0, shuffle=True)
    assert not torch.equal(next_epoch, shards[0])


def test_evaluation_shards_cover_every_image_once(split):
    shards = [split.shard_indices(0, r, 7, seed=0, shuffle=False) for r in range(7)]
    assert sorted(torch.cat(shards).tolist()) == list(range(len(split)))


def test_batches_are_normalized_floats(split):
    indices = split.shard_indices(1, 0, 1, seed=0, shuffle=True)
    batches = list(split.batches(indices, batch_size=1000))
    assert [x.shape[0] for x, _ in batches] == [1000, 1000, 400]
    x, y = batches[0]
    assert x.dtype == torch.float32 and x.shape[1:] == (1, 28, 28)
    expected = (split.images[indices[:1000]].float() / 255 - MEAN) / STD
    assert torch.allclose(x, expected)
    assert torch.equal(y, split.labels[indices[:1000]])
    assert steps_per_epoch(2400, 2, 128) == 10


def test_augment_flips_some_images(split):
    torch.manual_seed(0)
    indices = torch.arange(256)
    (plain, _), (flipped, _) = next(split.batches(indices, 256)), next(split.batches(indices, 256, augment=True))
    same = (plain == flipped).flatten(1).all(1)
    mirrored = (plain.flip(-1) == flipped).flatten(1).all(1)
    assert (same | mirrored).all() and 50 < mirrored.sum() < 206
