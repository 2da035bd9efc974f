"""Where FashionMNIST files live: torchvision's layout, `<root>/FashionMNIST/raw/*-ubyte`; the real set at a data
folder's top, the generated offline one under `<data>/synthetic/` (rayfleet/train/data/fetch.py), marked SYNTHETIC."""

from __future__ import annotations

from pathlib import Path

SYNTHETIC_MARKER = "SYNTHETIC"
SYNTHETIC_DIR = "synthetic"  # under a data folder: the generated offline set, never under the real set's name
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


def resolve(root: Path) -> Path:
    """The set a job given `root` reads: the one at `root` when it is complete (real, or marked SYNTHETIC), else
    the generated one `make data` left under `root`/synthetic when offline; else `root` (its error names it)."""
    root = Path(root)
    if not missing_files(root):
        return root
    generated = root / SYNTHETIC_DIR
    return generated if not missing_files(generated) else root
