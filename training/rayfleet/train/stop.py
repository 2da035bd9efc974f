"""Ask a running job to stop cleanly: checkpoint first, then end (a recipe's budget, rayfleet/recipes/budget.py).

The request is a file in the run directory (`stop.json`: the reason), so it works the same locally and in
S3 and needs nothing from Ray. Rank 0 reads it; every rank learns it through one all-reduce at a point all
ranks reach together (the end of a DDP epoch, a logged FSDP step), so they stop at the same step.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from rayfleet.core.run_dir import RunDir

if TYPE_CHECKING:
    import torch

STOP_FILE = "stop.json"
CANCELLED = "cancelled (rayfleet cancel)"  # the reason `rayfleet cancel` gives: the run ends CANCELLED
CANCELLED_NOW = "cancelled again (rayfleet cancel, twice)"  # the follower stops the job at once


def request(run_dir: RunDir, reason: str) -> None:
    run_dir.write(STOP_FILE, json.dumps({"reason": reason}))


def clear(run_dir: RunDir) -> None:
    """Before a run (re)starts: an old request must not stop the new attempt."""
    if STOP_FILE in run_dir.entries():
        run_dir.write(STOP_FILE, "{}")


def requested(run_dir: RunDir) -> str | None:
    text = run_dir.read(STOP_FILE)
    return json.loads(text).get("reason") if text else None


def agreed(run_dir: RunDir, rank: int, device: torch.device) -> str | None:
    """A collective: every rank calls it at the same point. The reason on every rank when rank 0 saw one."""
    import torch  # here: the queue's wait (rayfleet/recipes/admission.py) reads requests without torch
    import torch.distributed as dist

    reason = requested(run_dir) if rank == 0 else None
    flag = torch.tensor([1.0 if reason else 0.0], device=device)
    dist.all_reduce(flag)
    if flag.item() == 0:
        return None
    return reason or "rank 0 was asked to stop"
