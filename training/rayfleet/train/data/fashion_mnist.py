"""Load FashionMNIST with torchvision (downloading into the cache directory when allowed).

Returns the whole split as uint8 tensors: 60k x 28 x 28 is 47 MB, small enough to live on the training
device, so no per-sample PIL transform ever runs (see rayfleet.train.data.device_batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from rayfleet.train.data import staged
from rayfleet.train.data.layout import is_synthetic, missing_files, resolve

# FashionMNIST's labels 0-9, in torchvision's order
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)


@dataclass(frozen=True)
class Split:
    images: torch.Tensor  # uint8 [N, 28, 28]
    labels: torch.Tensor  # int64 [N]

    def __len__(self) -> int:
        return self.labels.numel()

    def head(self, count: int | None) -> Split:
        if count is None or count >= len(self):
            return self
        return Split(self.images[:count], self.labels[:count])


def load(root: str | Path, train: bool, download: bool = False) -> Split:
    """One split from `root` in torchvision's layout; FileNotFoundError names what is missing and why."""
    from torchvision.datasets import FashionMNIST

    root = Path(root)
    if not download and missing_files(root):
        raise FileNotFoundError(
            f"{root} has no FashionMNIST files ({', '.join(missing_files(root))} missing); "
            "run `make data` for a generated set or set download=true"
        )
    dataset = FashionMNIST(str(root), train=train, download=download)
    return Split(dataset.data, dataset.targets.long())


def describe(root: str | Path) -> str:
    return "SYNTHETIC FashionMNIST-format data" if is_synthetic(Path(root)) else "FashionMNIST"


def job_root(data_dir: str, s3_endpoint_url: str | None = None) -> Path:
    """The root a job given `data_dir` reads: the node's copy of an s3:// one (staged.local_copy: one per node),
    then the real set there, else `make data`'s offline one under it (layout.resolve)."""
    return resolve(staged.local_copy(data_dir, s3_endpoint_url))
