"""Loading FashionMNIST-format files through torchvision, and naming what is missing."""

from __future__ import annotations

import pytest
import torch

from rayfleet.train.data import fashion_mnist
from rayfleet.train.data.layout import is_synthetic, raw_files


def test_generated_files_load_through_torchvision(small_dataset):
    train = fashion_mnist.load(small_dataset, train=True)
    test = fashion_mnist.load(small_dataset, train=False)
    assert train.images.shape == (2400, 28, 28) and train.images.dtype == torch.uint8
    assert test.images.shape == (600, 28, 28) and test.labels.dtype == torch.int64
    assert set(train.labels.unique().tolist()) == set(range(10))
    assert is_synthetic(small_dataset)
    assert fashion_mnist.describe(small_dataset).startswith("SYNTHETIC")
    assert all(path.is_file() for path in raw_files(small_dataset).values())


def test_loader_names_missing_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="make data"):
        fashion_mnist.load(tmp_path, train=True)


def test_download_true_uses_files_already_in_the_cache(small_dataset, monkeypatch):
    """With the files present torchvision must not touch the network (the cache is the download dir)."""
    import torchvision.datasets.mnist as mnist

    def no_network(*args, **kwargs):
        raise AssertionError("tried to download although the files are there")

    monkeypatch.setattr(mnist, "download_and_extract_archive", no_network)
    assert len(fashion_mnist.load(small_dataset, train=False, download=True)) == 600
