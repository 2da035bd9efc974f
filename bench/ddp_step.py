"""Images/s of the DDP job's training step on one device, without Ray, as a table.

    python -m bench.ddp_step --device cuda                   # every variant below
    python -m bench.ddp_step --device cuda --variants bf16-cl,bf16-cl-fullgraph
    torchrun --nproc-per-node 8 -m bench.ddp_step --device cuda --variants bf16-cl-graphs

The job's own pieces, built by the job's own functions from the job's config keys (rayfleet.train.ddp:
build_model, make_step): generated FashionMNIST-format data held on the device as uint8, ResNet-18 with the
1-channel stem, fused Adam, DDP, the eager step or the whole step as one CUDA graph (rayfleet.train.ddp.step).
What `bench.ddp_epoch` measures through Ray Train, minus Ray: for machines where Ray is not installed
(the lent GPU machines) and to isolate the step from the framework around it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from rayfleet.core.config import load_config
from rayfleet.train.data import fashion_mnist, synthetic
from rayfleet.train.data.device_batches import DeviceSplit
from rayfleet.train.ddp import build_model, make_step
from rayfleet.train.ddp.config import DDPConfig, Runtime
from rayfleet.train.ddp.step import capture_stream, on_stream
from rayfleet.train.parallel import parallelize

# name: the job's config keys (rayfleet/train/configs/ddp.yaml) that make the variant
VARIANTS = {
    "fp32": ["precision=fp32", "channels_last=false", "cuda_graph=false"],
    "bf16-cl": ["precision=bf16", "cuda_graph=false"],
    "bf16-cl-compile": ["precision=bf16", "compile=true", "cuda_graph=false"],
    "bf16-cl-graphs": ["precision=bf16", "compile=true", "compile_mode=reduce-overhead", "cuda_graph=false"],
    "bf16-cl-fullgraph": ["precision=bf16", "cuda_graph=true"],
    "bf16-cl-compile-fullgraph": ["precision=bf16", "compile=true", "cuda_graph=true"],
}


def _measure(variant: str, data_dir: str, data: DeviceSplit, device: torch.device, batch: int, steps: int, warmup: int):
    """The job's own model, optimizer, DDP wrapper and step (rayfleet.train.ddp), built as the job builds
    them for `variant`; images/s over `steps` timed steps after `warmup` (which include a graph's capture)."""
    cfg = load_config(DDPConfig, None, [f"data_dir={data_dir}", f"batch_size={batch}", *VARIANTS[variant]])
    rt = Runtime.resolve(cfg, device)
    torch.manual_seed(0)
    model, optimizer = build_model(cfg, rt)
    stream = capture_stream(device, rt.cuda_graph)
    with on_stream(stream):
        wrapped = parallelize(model, device, "ddp", compile_mode=cfg.compile_mode if cfg.compile else None)
    step = make_step(wrapped, optimizer, cfg, rt, stream)
    data.channels_last = rt.channels_last
    rank, world = dist.get_rank(), dist.get_world_size()
    batches = list(data.batches(data.shard_indices(1, rank, world, 0, shuffle=True), batch, drop_last=True))

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
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    rows = []
    with tempfile.TemporaryDirectory(prefix="rayfleet-bench-") as root:
        synthetic.generate(Path(root), train=20_000, test=10)
        data = DeviceSplit(fashion_mnist.load(root, train=True), device)
        for variant in args.variants.split(","):
            images_per_s, loss = _measure(variant, root, data, device, args.batch, args.steps, args.warmup)
            rows.append(f"| {variant} | {args.batch} | {world} | {images_per_s:,.0f} | {loss:.3f} | {name} |")
    if rank == 0:
        print("| variant | batch/dev | devices | images/s/dev | last loss | device |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
