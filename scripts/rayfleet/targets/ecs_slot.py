"""An ECS run whose driver has no slot on the head instance yet: kept for the control task to start
(rayfleet/core/launch_queue.py, rayfleet/node/control/driver_dispatch.py), and waited for."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime

from rayfleet.core import stop_request
from rayfleet.core.aws import PlacementFailed
from rayfleet.core.launch_queue import Launches, Pending
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import Entry
from rayfleet.ecs.outputs import Outputs

POLL_S = 5.0
PROGRESS_S = 60.0  # a line this often while it waits
CANCELLED_WAITING = "cancelled while it waited for a driver slot"


def queue_for_slot(out: Outputs, run_dir: RunDir, entry: Entry, failed: PlacementFailed) -> Launches:
    """Keep the RunTask that found every driver share taken, for the control task to send again; `entry`:
    the run's queue entry-to-be, shown by `make queue` meanwhile."""
    launches = Launches.of_bucket(out.results_bucket)
    name = run_dir.run_name
    pending = Pending(name, entry.priority, entry.submitted_at, failed.request or {}, why=str(failed))
    pending.entry = asdict(entry)
    launches.put(pending)
    run_dir.send("waiting-for-a-driver-slot", state="QUEUED", target="ecs", message="waiting for a driver slot")
    print(
        f"[rayfleet] run {name}: the head instance's {out.concurrent_runs} driver slot(s) are taken; queued"
        f" (position {launches.position(name)}): the control task starts its trainer when one frees"
        f" (rayfleet queue; rayfleet cancel --run {name})",
        flush=True,
    )
    return launches


def wait_for_slot(launches: Launches, run_dir: RunDir, clock=time.monotonic, sleep=time.sleep) -> str | None:
    """The trainer's task ARN once the control task has placed it; None when the launch was cancelled. The
    first Ctrl-C cancels it, as while following a run (rayfleet/targets/ecs.py)."""
    name, said = run_dir.run_name, clock()
    try:
        while True:
            pending = launches.get(name)
            if pending is None:
                print(f"[rayfleet] run {name} was cancelled before its trainer started", file=sys.stderr)
                return None
            if pending.task_arn:
                waited = round(time.time() - pending.submitted_at)
                print(f"[rayfleet] run {name}: its trainer has a driver slot after {waited} s", flush=True)
                return pending.task_arn
            if clock() - said >= PROGRESS_S:
                where = launches.position(name)
                print(f"[rayfleet] run {name}: still waiting for a driver slot (position {where}; {pending.why})")
                said = clock()
            sleep(POLL_S)
    except KeyboardInterrupt:
        cancel_waiting(launches, run_dir)
        print(f"\n[rayfleet] Ctrl-C: run {name} cancelled while it waited for a driver slot", file=sys.stderr)
        raise


def cancel_waiting(launches: Launches, run_dir: RunDir) -> bool:
    """`make cancel` of a run waiting for a driver slot: it leaves the launch queue and ends CANCELLED; False
    when it does not wait (any more). The stop request is written either way: a trainer placed meanwhile
    reads it and never starts the run."""
    stop_request.request(run_dir, stop_request.CANCELLED)
    if not launches.cancel(run_dir.run_name):
        return False
    ended = datetime.now(UTC).isoformat(timespec="seconds")
    run_dir.send("cancelled", state="CANCELLED", message=CANCELLED_WAITING, ended_at=ended)
    return True
