"""Hugging Face Accelerate, nothing from rayfleet: `accelerate launch`'s environment in, files under
RAYFLEET_RUN_DIR out.

    accelerate launch --multi_gpu --num_processes 2 --mixed_precision no train.py --steps 40   # by hand
    launcher: accelerate                                      # the same script from a recipe, across worker nodes

(on a machine without GPUs add ACCELERATE_USE_CPU=true, as rayfleet does on CPU nodes). A small regression
model trains the Accelerate way: Accelerator(), prepare(model, optimizer, dataloader), accelerator.backward.
Every process writes what it saw to ranks/rank-<R>.json. --fail-rank R --fail-at-step S raises on that rank
to show how a failure ends a run.
"""

import argparse
import json
import os
import socket

import torch
from accelerate import Accelerator
from pyarrow import fs
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def storage(path: str):
    """(filesystem, path) for a local directory or s3://bucket/prefix."""
    if "://" in path:
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), os.path.abspath(path)


def write(path: str, data: bytes) -> None:
    filesystem, where = storage(path)
    filesystem.create_dir(os.path.dirname(where), recursive=True)
    with filesystem.open_output_stream(where) as out:
        out.write(data)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-at-step", type=int, default=-1)
    args = parser.parse_args()

    accelerator = Accelerator()
    rank, world = accelerator.process_index, accelerator.num_processes
    torch.manual_seed(0)  # the same initial weights and data everywhere; the dataloader shards the batches
    x = torch.randn(args.steps * args.batch_size * world, 16)
    y = (x @ torch.linspace(-1, 1, 16)).unsqueeze(1)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    losses = []
    model.train()
    for step, (inputs, targets) in enumerate(loader):
        loss = nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
        losses.append(loss.item())
        if rank == args.fail_rank and step == args.fail_at_step:
            raise RuntimeError(f"injected failure on rank {rank} at step {step}")
        if accelerator.is_main_process and (step + 1) % 10 == 0:
            print(f"step {step + 1}/{len(loader)} loss {loss.item():.4f}", flush=True)

    run_dir = os.environ.get("RAYFLEET_RUN_DIR", "out")
    seen = {
        "rank": rank,
        "world_size": world,
        "device": str(accelerator.device),
        "distributed_type": str(accelerator.distributed_type),
        **{k: os.environ.get(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")},
        **{k: os.environ.get(k) for k in ("RAYFLEET_NODE_RANK", "RAYFLEET_RAY_NODE_ID", "RAYFLEET_ATTEMPT")},
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "losses": losses,
    }
    write(f"{run_dir}/ranks/rank-{rank}.json", json.dumps(seen).encode())
    accelerator.wait_for_everyone()
    if accelerator.is_main_process and losses:
        print(f"done: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
    accelerator.end_training()


if __name__ == "__main__":
    main()
