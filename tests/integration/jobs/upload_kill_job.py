"""A Ray Train run whose checkpoints are written and uploaded in the background (`checkpoint.Uploads`, the
DDP job's path), for tests/integration/test_async_checkpoint_on_local_cluster.py.

    python tests/integration/jobs/upload_kill_job.py MARKS storage=DIR run_name=NAME

Every EVERY steps it reports a checkpoint holding the step. On the first attempt the write of the step-8
checkpoint, in Ray Train's upload thread, first records its process in MARKS/uploading and sleeps, as a
large upload would; rank 0 records each step it finishes in MARKS/step, and appends to MARKS/events, in
order, "<pid> step N" for each step and "<pid> wait N" / "<pid> waited N" around each wait for the previous
checkpoint's upload (`checkpoint.Uploads.wait`), so the test reads where the loop stopped from the order of
its own lines, not from a pause. The loop is in __main__, so Ray ships it by value.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from rayfleet.core.config import load_config
from rayfleet.train.fit import fit_and_summarize
from rayfleet.train.job_config import JobConfig

STEPS, EVERY, SLOW = 20, 4, 8


def mark(path: Path, text: str) -> None:
    """Write a mark the test polls whole or not at all (the test read a half-written one in CI: ValueError)."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


def event(marks: Path, line: str) -> None:
    """One whole line, appended: the test reads the file while it grows."""
    with open(marks / "events", "a") as f:
        f.write(f"{os.getpid()} {line}\n")


def loop(config: dict) -> None:
    import ray.train
    import torch
    import torch.distributed as dist

    from rayfleet.train import checkpoint

    marks, rank = Path(config["marks"]), ray.train.get_context().get_world_rank()
    uploads = checkpoint.Uploads()
    with checkpoint.latest() as found:
        start = json.loads((found / "step.json").read_text())["step"] if found else 0
    print(f"rank {rank} starts at step {start}", flush=True)
    for step in range(start, STEPS):
        dist.all_reduce(torch.ones(1))
        time.sleep(0.1)
        done = step + 1
        if rank == 0:
            mark(marks / "step", str(done))
            event(marks, f"step {done}")
        if done % EVERY:
            continue

        def write(directory: Path, done: int = done) -> None:
            if done == SLOW and not (marks / "uploading").exists():
                mark(marks / "uploading", str(os.getpid()))
                time.sleep(120)
            (directory / "step.json").write_text(json.dumps({"step": done}))

        if rank == 0:
            event(marks, f"wait {done}")
        uploads.wait()
        if rank == 0:
            event(marks, f"waited {done}")
        uploads.report(
            {"step": done}, checkpoint.step_checkpoint_name(done), write if rank == 0 else None, writers=1
        )  # rank 0 alone writes (and seals) it, as the DDP job's
    uploads.wait()


def main() -> int:
    marks, overrides = sys.argv[1], sys.argv[2:]
    cfg = load_config(JobConfig, None, ["num_workers=2", "cpus_per_worker=1", "device=cpu", *overrides])
    return fit_and_summarize(loop, cfg, cfg.run_name, {"marks": marks}, summary_lines=lambda row: [])


if __name__ == "__main__":
    sys.exit(main())
