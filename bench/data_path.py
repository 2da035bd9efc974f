"""How fast one epoch of training batches is produced: the blueprint's data path against rayfleet's.

    python -m bench.data_path [--data-dir data] [--batch-size 128]

Blueprint: torchvision FashionMNIST + ToTensor/Normalize per sample (PIL) through a DataLoader with a
DistributedSampler-like shuffle. rayfleet: the split held as uint8 on the device, batches gathered and
normalized there. Both on this machine's CPU, one worker process, in the same run; the ratio is what counts.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader
from torchvision import transforms
from torchvision.datasets import FashionMNIST

from rayfleet.train.data import fashion_mnist
from rayfleet.train.data.device_batches import MEAN, STD, DeviceSplit


def _epoch_seconds(batches) -> tuple[float, int]:
    start = time.perf_counter()
    images = 0
    for x, _ in batches:
        images += x.shape[0]
    return time.perf_counter() - start, images


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--loader-workers", type=int, default=0, help="DataLoader worker processes (blueprint: 0)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one Ray worker's share on a 2-core laptop

    blueprint = FashionMNIST(
        args.data_dir,
        train=True,
        transform=transforms.Compose([transforms.ToTensor(), transforms.Normalize((MEAN,), (STD,))]),
    )
    loader = DataLoader(blueprint, batch_size=args.batch_size, shuffle=True, num_workers=args.loader_workers)
    device_split = DeviceSplit(fashion_mnist.load(args.data_dir, train=True), torch.device("cpu"))
    indices = device_split.shard_indices(epoch=1, rank=0, world=1, seed=0, shuffle=True)

    rows = []
    for name, make in (
        ("blueprint: DataLoader + PIL transforms", lambda: loader),
        ("rayfleet: device-resident uint8", lambda: device_split.batches(indices, args.batch_size)),
    ):
        seconds, images = _epoch_seconds(make())
        rows.append((name, seconds, images / seconds))
    base = rows[0][1]
    print(f"| data path ({len(device_split):,} images, batch {args.batch_size}) | s/epoch | images/s | speed-up |")
    print("|---|---|---|---|")
    for name, seconds, rate in rows:
        print(f"| {name} | {seconds:.2f} | {rate:,.0f} | {base / seconds:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
