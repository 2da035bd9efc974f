"""Shared fixtures: a small generated FashionMNIST-format dataset."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.data import synthetic


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """2,400 train / 600 test images in torchvision's layout, generated once per test session."""
    root = tmp_path_factory.mktemp("fashion")
    synthetic.generate(root, train=2400, test=600, seed=1)
    return root
