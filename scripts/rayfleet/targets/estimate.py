"""`rayfleet run RECIPE --estimate`: what a run would cost before anything starts, kept in its record, and set
against what it did cost when it ends (rayfleet/recipes/run_ledger.py).

It says the group the run would go to, its place in that group's queue and when it would start at the latest
(the runs ahead run to their max_hours, as the queue's own projection: rayfleet/ops/runs/queued.py), how long it
would run (the mean and range of the same recipe's ended runs on that group, from their goodput ledgers; none:
"unknown"), and what that costs at the group's price. It is advice: the runs' records it reads are the jobs'
to write, so each value is bounded here and none of them reaches the queue's budget hold, which only ever uses
the recipe's max_hours and max_cost_usd and the deployment's settings (rayfleet/recipes/admission.py).
"""

from __future__ import annotations

import math
import statistics
import time

from rayfleet.core.ledger import LEDGER
from rayfleet.core.run_dir import RunDir, list_runs
from rayfleet.core.run_queue import ADMITTED, RUNNING, WAITING, Queue

HISTORY_RUNS = 20  # the newest of the recipe's runs read (by their default name, <recipe>-<UTC time>)
MAX_WALL_S = 30 * 24 * 3600.0  # a past run longer than a month is not one a ledger measured
ENDED = ("SUCCEEDED", "STOPPED")  # runs that ran to an end of their own: their time is the recipe's


def past_durations(storage: str, recipe: str, group: str | None, region: str | None = None) -> list[float]:
    """The run time (ledger wall_s) of the recipe's ended runs on `group`: the newest HISTORY_RUNS of those named
    as `rayfleet run` names them (a run given a name of its own is not looked for: every record read is a GET)."""
    found = []
    names = [n for n in list_runs(storage, region) if n.startswith(f"{recipe}-")]
    for name in names[-HISTORY_RUNS:]:
        record = RunDir(storage, name, region=region).record()
        ledger = record.get(LEDGER)
        wall = ledger.get("wall_s") if isinstance(ledger, dict) else None
        if record.get("recipe") != recipe or record.get("state") not in ENDED or record.get("group") != group:
            continue
        ok = isinstance(wall, int | float) and not isinstance(wall, bool) and math.isfinite(wall)
        if ok and 0 < wall <= MAX_WALL_S:
            found.append(float(wall))
    return found


def duration(past: list[float]) -> dict | None:
    """Mean and range of the past runs' times; None with no history."""
    if not past:
        return None
    return {"runs": len(past), "mean_s": statistics.fmean(past), "low_s": min(past), "high_s": max(past)}


def queue_ahead(queue_root: str, group: str | None, now: float) -> dict:
    """The runs ahead in the group's line (same group, or none named), and when this one starts at the latest."""
    queue = Queue(queue_root)
    queue.warn = lambda _line: None
    entries, _ = queue.scan(now)
    mine = [e for e in entries if not group or not e.group or e.group == group]  # run_queue.shares_workers
    free_at: float | None = now
    for entry in mine:
        hours = entry.max_hours
        if entry.state in (ADMITTED, RUNNING):
            end = None if hours is None else (entry.admitted_at or now) + hours * 3600
        elif entry.state == WAITING:
            end = None if hours is None or free_at is None else free_at + hours * 3600
        else:
            continue
        free_at = None if free_at is None or end is None else max(free_at, end)
    return {"ahead": len([e for e in mine if e.state in (ADMITTED, RUNNING, WAITING)]), "start_by": free_at}


def build(group: str | None, usd_per_hour: float, past: list[float], ahead: dict, now: float) -> dict:
    expected = duration(past)
    cost = None
    if expected is not None:
        cost = {k.replace("_s", "_usd"): round(v / 3600 * usd_per_hour, 4) for k, v in expected.items() if k != "runs"}
    return {
        "made_at": now,
        "group": group,
        "usd_per_hour": usd_per_hour,
        "queue": ahead,
        "duration": expected,
        "cost": cost,
    }


def lines(estimate: dict, now: float | None = None) -> list[str]:
    now = time.time() if now is None else now
    group = estimate["group"] or "any node of the cluster"
    out = [f"estimate for group {group} at ${estimate['usd_per_hour']:.2f}/hour (advice: nothing was started):"]
    queue = estimate["queue"]
    if not queue["ahead"]:
        out.append("  start: now (no run ahead in its queue)")
    elif queue["start_by"] is None:
        out.append(f"  start: after {queue['ahead']} run(s) ahead; when is unknown (one has no max_hours)")
    else:
        wait = max(queue["start_by"] - now, 0.0)
        out.append(f"  start: after {queue['ahead']} run(s) ahead, within {wait / 60:.0f} min (their max_hours)")
    expected, cost = estimate["duration"], estimate["cost"]
    if expected is None:
        out.append("  duration: unknown (no ended run of this recipe on this group yet); cost: unknown")
    else:
        out.append(
            f"  duration: {expected['mean_s'] / 60:.1f} min (from {expected['runs']} past run(s): "
            f"{expected['low_s'] / 60:.1f}-{expected['high_s'] / 60:.1f} min)"
        )
        out.append(f"  cost: ${cost['mean_usd']:.2f} (${cost['low_usd']:.2f}-${cost['high_usd']:.2f})")
    return out
