"""Where FashionMNIST files live: torchvision's layout, `<root>/FashionMNIST/raw/*-ubyte`."""

from __future__ import annotations

from pathlib import Path

SYNTHETIC_MARKER = "SYNTHETIC"
_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def raw_dir(root: Path) -> Path:
    return Path(root) / "FashionMNIST" / "raw"


def raw_files(root: Path) -> dict[str, Path]:
    return {key: raw_dir(root) / name for key, name in _NAMES.items()}


def missing_files(root: Path) -> list[str]:
    return [path.name for path in raw_files(root).values() if not path.is_file()]


def is_synthetic(root: Path) -> bool:
    return (Path(root) / SYNTHETIC_MARKER).is_file()
