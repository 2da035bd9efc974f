"""The synthetic FashionMNIST-format generator: learnable, not trivial, deterministic."""

from __future__ import annotations

import pytest
import torch

from rayfleet.train.data import fashion_mnist, synthetic


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


def test_generator_is_deterministic(tmp_path):
    a = synthetic.generate(tmp_path / "a", train=50, test=20, seed=3)
    b = synthetic.generate(tmp_path / "b", train=50, test=20, seed=3)
    assert (a / "train-images-idx3-ubyte").read_bytes() == (b / "train-images-idx3-ubyte").read_bytes()
    with pytest.raises(ValueError):
        synthetic.generate(tmp_path / "c", train=5, test=20)
