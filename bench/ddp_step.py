"""Images/s of the DDP job's training step on one device, without Ray, as a table.

    python -m bench.ddp_step --device cuda                   # fp32, bf16, bf16+compile, +CUDA graphs
    torchrun --nproc-per-node 8 -m bench.ddp_step --device cuda --variants bf16-cl-graphs

The job's own pieces (rayfleet.train.models, rayfleet.train.data.device_batches, rayfleet.train.parallel): generated
FashionMNIST-format data held on the device as uint8, ResNet-18 with the 1-channel stem, Adam, DDP.
What `bench.ddp_epoch` measures through Ray Train, minus Ray: for machines where Ray is not installed
(the lent GPU machines) and to isolate the step from the framework around it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from rayfleet.train.data import fashion_mnist, synthetic
from rayfleet.train.data.device_batches import DeviceSplit
from rayfleet.train.models.resnet import resnet18_grayscale
from rayfleet.train.parallel import parallelize

# name: (bf16 autocast, channels_last, compile mode or None)
VARIANTS = {
    "fp32": (False, False, None),
    "bf16-cl": (True, True, None),
    "bf16-cl-compile": (True, True, "default"),
    "bf16-cl-graphs": (True, True, "reduce-overhead"),
}


def _measure(variant: str, data: DeviceSplit, device: torch.device, batch: int, steps: int, warmup: int):
    bf16, channels_last, mode = VARIANTS[variant]
    torch.manual_seed(0)
    model = resnet18_grayscale().to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, fused=device.type == "cuda")
    ddp_model = parallelize(model, device, "ddp", compile_mode=mode)
    data.channels_last = channels_last
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = data.batches(data.shard_indices(1, rank, world, 0, shuffle=True), batch, drop_last=True)
    batches = list(batches)

    def step(x, y):
        with autocast:
            loss = F.cross_entropy(ddp_model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    for i in range(warmup):
        step(*batches[i % len(batches)])
    torch.cuda.synchronize(device) if device.type == "cuda" else None
    start = time.perf_counter()
    for i in range(steps):
        last = step(*batches[i % len(batches)])
    torch.cuda.synchronize(device) if device.type == "cuda" else None
    seconds = time.perf_counter() - start
    return steps * batch / seconds, float(last)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=128, help="images per device per step")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated: " + ", ".join(VARIANTS))
    args = parser.parse_args(argv)

    cuda = args.device == "cuda"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29562")
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    with tempfile.TemporaryDirectory(prefix="rayfleet-bench-") as root:
        synthetic.generate(Path(root), train=20_000, test=10)
        data = DeviceSplit(fashion_mnist.load(root, train=True), device)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    rows = []
    for variant in args.variants.split(","):
        images_per_s, loss = _measure(variant, data, device, args.batch, args.steps, args.warmup)
        rows.append(f"| {variant} | {args.batch} | {world} | {images_per_s:,.0f} | {loss:.3f} | {name} |")
    if rank == 0:
        print("| variant | batch/dev | devices | images/s/dev | last loss | device |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
