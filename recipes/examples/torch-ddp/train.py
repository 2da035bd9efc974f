"""Plain PyTorch DDP, nothing from rayfleet: torchrun's environment in, files under RAYFLEET_RUN_DIR out.

    torchrun --nproc-per-node 2 train.py --steps 30       # by hand
    launcher: torchrun                                    # the same script from a recipe, across worker nodes

An all-reduce checks the process group, then a small regression model trains with DDP. Rank 0 saves a
checkpoint every --checkpoint-every steps (whole or not at all: `write`) and a restarted run resumes from
it; every rank writes what it saw to ranks/rank-<R>.json. --fail-rank R --fail-at-step S raises on that
rank (on the first attempt only with --fail-once) to show how a failure ends, or restarts, a run.

Preemption: when a node of the run is about to go, rayfleet writes the file named by RAYFLEET_PREEMPT_FILE
(with the seconds left) and sends SIGUSR1 to every rank that catches it. Each step the ranks agree, in one
tiny all-reduce, whether any of them has heard; then rank 0 saves at that step and every rank exits, and the
run launched again on the nodes that are left resumes from that step: no step is lost.
"""

import argparse
import io
import json
import os
import signal
import socket
import time

import torch
import torch.distributed as dist
from pyarrow import fs
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def storage(path: str):
    """(filesystem, path) for a local directory or s3://bucket/prefix."""
    if "://" in path:
        return fs.FileSystem.from_uri(path)
    return fs.LocalFileSystem(), os.path.abspath(path)


def write(path: str, data: bytes) -> None:
    """Written under a temporary name and moved into place whole: a rank killed while writing (a lost node, a
    preemption) leaves the previous file as it was, never half a checkpoint that the next attempt cannot load.
    (A local move is a rename; on S3 the move copies a whole object.)"""
    filesystem, where = storage(path)
    filesystem.create_dir(os.path.dirname(where), recursive=True)
    partial = f"{where}.partial"
    with filesystem.open_output_stream(partial) as out:
        out.write(data)
    filesystem.move(partial, where)


def read(path: str) -> bytes | None:
    filesystem, where = storage(path)
    if filesystem.get_file_info(where).type == fs.FileType.NotFound:
        return None
    with filesystem.open_input_stream(where) as src:
        return src.read()


class PreemptNotice:
    """Whether this node has heard that a node of the run is about to go: SIGUSR1, or the notice file."""

    def __init__(self) -> None:
        self.path = os.environ.get("RAYFLEET_PREEMPT_FILE")
        self.signalled = False
        signal.signal(signal.SIGUSR1, self.on_signal)
        signal.siginterrupt(signal.SIGUSR1, False)  # restart what it interrupts: gloo aborts on EINTR

    def on_signal(self, signum, frame) -> None:
        self.signalled = True

    def read(self) -> dict | None:
        if not self.path or not os.path.exists(self.path):
            return None
        with open(self.path) as f:
            return json.load(f)

    def heard_anywhere(self, device) -> bool:
        """The same answer on every rank (one all-reduce), so that every rank stops at the same step."""
        heard = torch.tensor([float(self.signalled or self.read() is not None)], device=device)
        dist.all_reduce(heard, op=dist.ReduceOp.MAX)
        return bool(heard.item())


def save(checkpoint: str, model, optimizer, step: int) -> None:
    buffer = io.BytesIO()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, buffer)
    write(checkpoint, buffer.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-at-step", type=int, default=-1)
    parser.add_argument("--fail-once", action="store_true")
    parser.add_argument("--pace", type=float, default=0.0, help="seconds to sleep after each step: a run to watch")
    args = parser.parse_args()

    notice = PreemptNotice()
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(f"cuda:{os.environ['LOCAL_RANK']}" if cuda else "cpu")
    check = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(check)
    assert check.item() == world * (world + 1) / 2, check
    print(f"rank {rank}/{world} ready on {socket.gethostname()}, all-reduce ok", flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    run_dir = os.environ.get("RAYFLEET_RUN_DIR", "out")
    checkpoint = f"{run_dir}/checkpoint/state.pt"
    start = 0
    saved = read(checkpoint)
    if saved is not None:
        state = torch.load(io.BytesIO(saved), map_location=device)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        if rank == 0:
            print(f"resuming from the checkpoint of step {start}", flush=True)
    ddp = DistributedDataParallel(model)
    weights = torch.linspace(-1, 1, 16, device=device)
    generator = torch.Generator(device="cpu").manual_seed(1000 + rank)
    losses = []
    for step in range(start, args.steps):
        x = torch.randn(64, 16, generator=generator).to(device)
        y = (x @ weights).unsqueeze(1)
        loss = nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        attempt = os.environ.get("RAYFLEET_ATTEMPT", "1")
        if rank == args.fail_rank and step == args.fail_at_step and not (args.fail_once and attempt != "1"):
            raise RuntimeError(f"injected failure on rank {rank} at step {step}")
        if rank == 0 and (step + 1) % 10 == 0:
            print(f"step {step + 1}/{args.steps} loss {loss.item():.4f}", flush=True)
        if notice.heard_anywhere(device):
            heard = notice.read() or {}
            how = "signal and file" if notice.signalled and heard else "signal" if notice.signalled else "file"
            print(f"preemption notice ({how}): node {heard.get('node_rank')} goes in {heard.get('deadline_s')} s; "
                  f"saving at step {step + 1}", flush=True)  # fmt: skip
            if rank == 0:
                save(checkpoint, model, optimizer, step + 1)
            heard.update(rank=rank, step=step + 1, signalled=notice.signalled)
            write(f"{run_dir}/notices/rank-{rank}-attempt-{attempt}.json", json.dumps(heard).encode())
            dist.barrier()  # the checkpoint is written before any rank exits
            dist.destroy_process_group()
            return
        if rank == 0 and (step + 1) % args.checkpoint_every == 0:
            save(checkpoint, model, optimizer, step + 1)
        dist.barrier()  # no rank runs ahead of a checkpoint it could be asked to resume from
        time.sleep(args.pace)
    seen = {
        "rank": rank,
        "world_size": world,
        **{k: os.environ.get(k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")},
        **{k: os.environ.get(k) for k in ("RAYFLEET_NODE_RANK", "RAYFLEET_RAY_NODE_ID", "RAYFLEET_ATTEMPT")},
        "host": socket.gethostname(),
        "cwd": os.getcwd(),
        "start_step": start,
        "losses": losses,
    }
    write(f"{run_dir}/ranks/rank-{rank}.json", json.dumps(seen).encode())
    dist.destroy_process_group()
    if rank == 0 and losses:
        print(f"done: {args.steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
