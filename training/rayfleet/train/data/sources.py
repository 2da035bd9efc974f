"""Where the flagship jobs' real datasets come from: pinned locations (a mirror after the first where one exists)
and each file's published checksum, so a download is the published file or nothing (rayfleet/train/data/fetch.py).

  * FashionMNIST: torchvision's mirror and Zalando Research's own repository, with the MD5 sums torchvision
    publishes for these four files (`torchvision.datasets.FashionMNIST.resources`).
  * tiny_shakespeare: Karpathy's char-rnn `input.txt`, the one location it has, with the size and SHA-256
    that TensorFlow Datasets publishes for it (tensorflow_datasets/datasets/tiny_shakespeare/checksums.tsv).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Remote:
    """One published file: its name, its locations (first preferred) and its checksum ("md5:..."/"sha256:...")."""

    name: str
    urls: tuple[str, ...]
    checksum: str
    size: int | None = None


FASHION_MNIST_MIRRORS = (
    "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    "https://raw.githubusercontent.com/zalandoresearch/fashion-mnist/master/data/fashion/",
)
FASHION_MNIST = tuple(
    Remote(name, tuple(mirror + name for mirror in FASHION_MNIST_MIRRORS), f"md5:{md5}")
    for name, md5 in (
        ("train-images-idx3-ubyte.gz", "8d4fb7e6c68d591d4c3dfef9ec88bf0d"),
        ("train-labels-idx1-ubyte.gz", "25c81989df183df01b3e8a0aad5dffbe"),
        ("t10k-images-idx3-ubyte.gz", "bef4ecab320f06d8554ea6380940ec79"),
        ("t10k-labels-idx1-ubyte.gz", "bb300cfdad3c16e7a12a480ee83cd310"),
    )
)
TINY_SHAKESPEARE = Remote(
    "input.txt",
    ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
    "sha256:86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    1_115_394,
)
