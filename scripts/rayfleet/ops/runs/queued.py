"""The run queue of the local cluster and of the deployment: running and waiting runs, in order, and why.

    rayfleet queue [--json] [--outputs FILE]

Each waiting run's job keeps its own entry (rayfleet/core/run_queue.py, rayfleet/recipes/admission.py), so this
only reads: `<local cluster state>/queue/` and, once deployed, s3://<results bucket>/queue/, and after them the
runs whose trainer waits for a driver slot (s3://<results bucket>/cluster/launches/, state `no-slot`).
Every job may write under queue/: an object there that is not an entry its run's job could have written is
listed as `ignored` with the reason (no reader counts it: rayfleet/core/run_queue_checks.py), and every field a
job wrote reaches the terminal through rayfleet/core/terminal.py `printable()`.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict

from botocore.exceptions import BotoCoreError, ClientError

from rayfleet.core.errors import RayfleetError
from rayfleet.core.launch_queue import Launches, Pending
from rayfleet.core.moved import gone
from rayfleet.core.run_queue import ADMITTED, RUNNING, WAITING, Entry, Ignored, Queue, shares_workers, waiting
from rayfleet.core.terminal import printable
from rayfleet.ecs.outputs import MissingOutputs, Outputs
from rayfleet.local.cluster import state_dir

NO_SLOT = "no-slot"  # an ECS run whose trainer waits for a driver slot on the head instance
IGNORED = "ignored"  # an object under queue/ that no reader counts


def rows(entries: list[Entry], where: str, now: float) -> list[dict]:
    """One row per entry, in queue order; `position` counts the waiting runs only (None for the others);
    `cost_usd`, what it has held so far; `start_at`, when a waiting run starts at the latest (`projected`)."""
    out, ahead = [], []
    starts = projected(entries, now)
    for entry in entries:
        if entry.state == WAITING:  # its place in its group's line: the waiting runs that share its workers
            ahead.append(entry)
            position = sum(1 for other in ahead if shares_workers(other, entry))
        out.append(
            {
                **asdict(entry),
                "where": where,
                "position": position if entry.state == WAITING else None,
                "since_s": round(now - (entry.admitted_at or entry.submitted_at)),
                "resources": entry.resources(),
                "cost_usd": round(entry.spent_usd(now), 2),
                "start_at": starts.get(entry.run),
            }
        )
    return out


def ignored_rows(ignored: list[Ignored], where: str) -> list[dict]:
    """One row per object under queue/ that no reader counts, named by its file, with why."""
    return [
        {
            "run": item.name.removesuffix(".json"),
            "where": where,
            "state": IGNORED,
            "position": None,
            "priority": None,
            "resources": "",
            "since_s": None,
            "start_at": None,
            "cost_usd": 0.0,
            "who": "",
            "reason": item.reason,
        }
        for item in ignored
    ]


def listed(queue: Queue, where: str, now: float) -> list[dict]:
    """The queue's rows, then the objects in it that no reader counts (said here, not warned about)."""
    queue.warn = lambda _line: None
    entries, ignored = queue.scan(now)
    return rows(entries, where, now) + ignored_rows(ignored, where)


def projected(entries: list[Entry], now: float) -> dict[str, float | None]:
    """Each waiting run's start at the latest (epoch seconds): when the runs ahead of it have all run to their
    `max_hours`, one after another (the queue admits one at a time and never backfills). None once a run
    ahead has no `max_hours`: nothing bounds it."""
    free_at: float | None = now
    for entry in entries:
        if entry.state in (ADMITTED, RUNNING):
            end = None if entry.max_hours is None else (entry.admitted_at or now) + entry.max_hours * 3600
            free_at = None if free_at is None or end is None else max(free_at, end)
    starts: dict[str, float | None] = {}
    for entry in waiting(entries):
        starts[entry.run] = free_at
        free_at = None if free_at is None or entry.max_hours is None else free_at + entry.max_hours * 3600
    return starts


def slot_rows(launches: list[Pending], now: float) -> list[dict]:
    """The runs waiting for a driver slot on ECS (rayfleet/core/launch_queue.py), after the queue's: their
    trainers have not started, so they have not joined it yet; `position` counts among them."""
    out = []
    for position, pending in enumerate(launches, start=1):
        shown = {"state": NO_SLOT, "reason": f"waiting for a driver slot: {pending.why}"}
        try:
            entry = Entry(**{**pending.entry, **shown})
        except TypeError:  # written by another version: what the launch itself says
            entry = Entry(pending.run, pending.priority, pending.submitted_at, 0, 0.0, **shown)
        out.extend({**row, "position": position} for row in rows([entry], "ecs", now))
    return out


def _start(row: dict, now: float) -> str:
    if row["state"] != WAITING:
        return "-"
    if row["start_at"] is None:
        return "?"
    minutes = max(0, round((row["start_at"] - now) / 60))
    return "now" if minutes == 0 else f"<{minutes}m"


def table(found: list[dict], now: float) -> str:
    if not found:
        return "the queue is empty: nothing waits and no queued run is running"
    head = f"{'POS':<5}{'RUN':<34}{'WHERE':<7}{'GROUP':<10}{'STATE':<10}{'PRIO':<6}{'RESOURCES':<22}{'SINCE':<8}"
    head += f"{'START':<8}"
    lines = [f"{head}{'COST':<10}{'WHO':<24}WHY"]
    for r in found:
        shown = {k: printable("-" if r[k] is None else r[k]) for k in ("run", "state", "priority", "since_s", "who")}
        group = printable(r.get("group") or "-")[:9]
        lines.append(
            f"{r['position'] or '-'!s:<5}{shown['run']:<34}{r['where']:<7}{group:<10}{shown['state']:<10}"
            f"{shown['priority']:<6}"
            f"{r['resources']:<22}{shown['since_s']:<8}{_start(r, now):<8}{'$' + format(r['cost_usd'], '.2f'):<10}"
            f"{shown['who'][:23]:<24}{printable(r['reason'])}"
        )
    return "\n".join(lines)


def show_queue(as_json: bool = False, outputs: str | None = None) -> int:
    """`rayfleet queue`: the local cluster's queue, then the deployment's and its runs waiting for a slot."""
    now = time.time()
    found = listed(Queue(str(state_dir())), "local", now)
    try:
        out = Outputs.load(outputs)
        if out.results_bucket:
            found += listed(Queue(f"s3://{out.results_bucket}"), "ecs", now)
            found += slot_rows(Launches.of_bucket(out.results_bucket).waiting(), now)
    except MissingOutputs:
        pass  # nothing deployed: the local queue only
    except (RayfleetError, BotoCoreError, ClientError) as exc:
        print(f"warning: the deployment's queue not listed: {exc}", file=sys.stderr)
    print(json.dumps(found, indent=2) if as_json else table(found, now))
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.runs.queued", "rayfleet queue")
