"""The stop request: how anything asks a running job to stop cleanly, checkpoint first, then end (a recipe's
budget, rayfleet/recipes/budget.py; `rayfleet cancel`).

The request is a file in the run directory (`stop.json`: the reason), so it works the same locally and in
S3 and needs nothing from Ray. The job's rank 0 reads it and every rank learns it through one all-reduce
(rayfleet/train/control/run_control.py `agreed`), so all stop at the same step. A job can write its own run folder,
so the reason is data, never a command: readers compare it with the constants here.
"""

from __future__ import annotations

import json

from rayfleet.core.run_dir import RunDir

STOP_FILE = "stop.json"
CANCELLED = "cancelled (rayfleet cancel)"  # the reason `rayfleet cancel` gives: the run ends CANCELLED
CANCELLED_NOW = "cancelled again (rayfleet cancel, twice)"  # the follower stops the job at once
MAX_REASON = 500  # characters of a reason kept: the file is the job's to write


def request(run_dir: RunDir, reason: str) -> None:
    run_dir.write(STOP_FILE, json.dumps({"reason": reason}))


def clear(run_dir: RunDir) -> None:
    """Before a run (re)starts: an old request must not stop the new attempt."""
    if STOP_FILE in run_dir.entries():
        run_dir.write(STOP_FILE, "{}")


def requested(run_dir: RunDir) -> str | None:
    """The reason asked for, or None; a file that is not a request of this shape counts as none."""
    text = run_dir.read(STOP_FILE)
    if not text:
        return None
    try:
        reason = json.loads(text).get("reason")
    except (ValueError, AttributeError):
        return None
    return reason[:MAX_REASON] if isinstance(reason, str) and reason else None
