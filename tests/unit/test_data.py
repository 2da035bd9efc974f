from __future__ import annotations

import numpy as np
import pytest
import torch

from training.data import fashion_mnist, synthetic
from training.data.device_batches import MEAN, STD, DeviceSplit, steps_per_epoch
from training.data.idx import read_idx, write_idx
from training.data.layout import is_synthetic, raw_files


def test_idx_round_trip(tmp_path):
    array = np.random.default_rng(0).integers(0, 256, size=(5, 28, 28), dtype=np.uint8)
    write_idx(tmp_path / "x-idx3-ubyte", array)
    assert np.array_equal(read_idx(tmp_path / "x-idx3-ubyte"), array)
    raw = (tmp_path / "x-idx3-ubyte").read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03" and int.from_bytes(raw[4:8], "big") == 5


def test_idx_rejects_truncated_files(tmp_path):
    write_idx(tmp_path / "y", np.zeros((4, 2), dtype=np.uint8))
    (tmp_path / "y").write_bytes((tmp_path / "y").read_bytes()[:-1])
    with pytest.raises(ValueError, match="holds 7 bytes"):
        read_idx(tmp_path / "y")


def test_generated_files_load_through_torchvision(small_dataset):
    train = fashion_mnist.load(small_dataset, train=True)
    test = fashion_mnist.load(small_dataset, train=False)
    assert train.images.shape == (2400, 28, 28) and train.images.dtype == torch.uint8
    assert test.images.shape == (600, 28, 28) and test.labels.dtype == torch.int64
    assert set(train.labels.unique().tolist()) == set(range(10))
    assert is_synthetic(small_dataset)
    assert fashion_mnist.describe(small_dataset).startswith("SYNTHETIC")
    assert all(path.is_file() for path in raw_files(small_dataset).values())


def test_generated_classes_are_learnable_but_not_trivial(small_dataset):
    """Nearest-centroid is well above chance (10%) though far from perfect: shifts and several shapes per
    class leave room for a CNN to learn (the integration tests show ResNet-18 doing so)."""
    train = fashion_mnist.load(small_dataset, train=True)
    test = fashion_mnist.load(small_dataset, train=False)
    x = train.images.float().flatten(1)
    centroids = torch.stack([x[train.labels == c].mean(0) for c in range(10)])
    predicted = torch.cdist(test.images.float().flatten(1), centroids).argmin(1)
    accuracy = (predicted == test.labels).float().mean().item()
    assert 0.3 < accuracy < 0.9


def test_loader_names_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="make data"):
        fashion_mnist.load(tmp_path, train=True)


def test_generator_is_deterministic(tmp_path):
    a = synthetic.generate(tmp_path / "a", train=50, test=20, seed=3)
    b = synthetic.generate(tmp_path / "b", train=50, test=20, seed=3)
    assert (a / "train-images-idx3-ubyte").read_bytes() == (b / "train-images-idx3-ubyte").read_bytes()
    with pytest.raises(ValueError):
        synthetic.generate(tmp_path / "c", train=5, test=20)


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


def test_download_true_uses_files_already_in_the_cache(small_dataset, monkeypatch):
    """With the files present torchvision must not touch the network (the cache is the download dir)."""
    import torchvision.datasets.mnist as mnist

    def no_network(*args, **kwargs):
        raise AssertionError("tried to download although the files are there")

    monkeypatch.setattr(mnist, "download_and_extract_archive", no_network)
    assert len(fashion_mnist.load(small_dataset, train=False, download=True)) == 600
