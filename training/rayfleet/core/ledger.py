"""A run's goodput ledger: where its node time went, phase by phase, priced, and what no phase explains.

The job's rank 0 times the disjoint parts of its own loop (`Phases`: data loading and the loader's wait in the
step loop, model load, compute, evaluation, checkpoint pauses, steps redone after a fault) and sends the
running totals to the run record with the wall-clock times at which its loop began and last reported
(`EVENT`); the process that follows the run adds what only it sees (run start: from its own start to the
loop's; teardown: from the loop's last report to the run's end) and builds the ledger once the run ends,
in any state (`build`). Whatever the phases do not explain is its own row, `unaccounted`, never folded into
compute. Prices are the run's hourly price (rayfleet/recipes/cost.py: list price, or the Spot price history):
an estimate, not the bill.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager

SUBMITTED = "submitted_epoch"  # the record's field: when `rayfleet run` began the submission (epoch s)
NODE_WAIT = "node_wait_s"  # the record's field: how long `rayfleet run` waited for the run's nodes to come
EVENT = "phases"  # the run record's field rank 0 sends: {"seconds": {phase: s}, "loop_began": t, "reported": t}
LEDGER = "ledger"  # the run record's field the follower writes: build()'s result
# In the order a run goes through them; `compute` is the goodput.
PHASES = (
    "queue",
    "node_start",
    "run_start",
    "data",
    "model_load",
    "compute",
    "evaluation",
    "checkpoint",
    "redone",
    "hung",
    "teardown",
)
UNACCOUNTED = "unaccounted"
LABELS = {
    "queue": "waiting in the queue",
    "node_start": "nodes starting",
    "run_start": "run start (driver, Ray Train, process group)",
    "data": "data (loading, loader waits)",
    "model_load": "model load",
    "compute": "compute (steps)",
    "evaluation": "evaluation",
    "checkpoint": "checkpoint pauses",
    "redone": "steps redone after a fault",
    "hung": "hung",
    "teardown": "drain and teardown",
    UNACCOUNTED: "unaccounted",
}


class LedgerError(ValueError):
    """Phases that cannot be a ledger: a negative one, an unknown one, or more time than the run had."""


class Phases:
    """Rank 0's running totals, from perf_counter around disjoint parts of its loop."""

    def __init__(self, clock=time.perf_counter, wall=time.time):
        self.seconds: dict[str, float] = {}
        self.clock, self.wall = clock, wall
        self.loop_began = wall()

    def add(self, phase: str, seconds: float) -> None:
        if phase not in PHASES:
            raise LedgerError(f"unknown phase {phase!r}")
        if seconds < 0:
            raise LedgerError(f"{phase}: {seconds} s")
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def move(self, source: str, target: str, seconds: float) -> None:
        """`seconds` of `source` were `target` after all (steps redone: compute that repeats earlier work)."""
        seconds = min(seconds, self.seconds.get(source, 0.0))
        self.seconds[source] = self.seconds.get(source, 0.0) - seconds
        self.add(target, seconds)

    @contextmanager
    def timed(self, phase: str):
        began = self.clock()
        try:
            yield
        finally:
            self.add(phase, self.clock() - began)

    def event(self) -> dict:
        return {"seconds": dict(self.seconds), "loop_began": self.loop_began, "reported": self.wall()}


def _seconds(value) -> bool:
    """A duration a process could have measured: a finite number, not negative (and not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0


def build(
    started: float, ended: float, sent: list[dict], usd_per_hour: float, before_loop: dict[str, float] | None = None
) -> dict:
    """The ledger of a run that ran from `started` to `ended` (wall-clock s), from what rank 0 `sent` (its last
    EVENT of each attempt; none when its loop never reported: a launcher recipe's), the run's hourly price, and
    the phases its follower timed between `started` and the loop's start (`before_loop`: the queue wait)."""
    wall_s = max(ended - started, 0.0)
    seconds = {p: 0.0 for p in PHASES}
    for phase, value in (before_loop or {}).items():
        if phase not in PHASES or not _seconds(value):
            raise LedgerError(f"phase {phase!r}: {value!r}")
        seconds[phase] += min(float(value), wall_s)
    waited = sum(seconds.values())
    # an earlier submission's attempts (the run's name submitted again) are not this run's time
    sent = [e for e in sent if not isinstance(e.get("loop_began"), int | float) or e["loop_began"] >= started - 1.0]
    for event in sent:
        if not isinstance(event.get("seconds", {}), dict):
            raise LedgerError(f"phases {event.get('seconds')!r}")
        for phase, value in (event.get("seconds") or {}).items():
            if phase not in PHASES or not _seconds(value):
                raise LedgerError(f"phase {phase!r}: {value!r}")
            seconds[phase] += float(value)
    if sent:
        began = min(float(e.get("loop_began") or started) for e in sent)
        reported = max(float(e.get("reported") or ended) for e in sent)
        seconds["run_start"] += min(max(began - started - waited, 0.0), wall_s)
        seconds["teardown"] += min(max(ended - reported, 0.0), wall_s)
    accounted = sum(seconds.values())
    if accounted > wall_s * 1.01 + 0.5:  # clocks of two processes: a little slack, never a phase overlap
        raise LedgerError(f"the phases add up to {accounted:.1f} s of a {wall_s:.1f} s run: they overlap")
    rows = [(p, s) for p, s in seconds.items() if s > 0] + [(UNACCOUNTED, max(wall_s - accounted, 0.0))]
    usd_per_s = usd_per_hour / 3600.0
    return {
        "wall_s": round(wall_s, 3),
        "usd_per_hour": usd_per_hour,
        "phases": [
            {
                "phase": p,
                "seconds": round(s, 3),
                "share": round(s / wall_s, 4) if wall_s else 0.0,
                "usd": round(s * usd_per_s, 4),
            }
            for p, s in rows
        ],
        "goodput": round(seconds["compute"] / wall_s, 4) if wall_s else 0.0,
        "job_phases": bool(sent),  # False: the job timed nothing of its own (only the built-in jobs do)
        "cost_usd": round(wall_s * usd_per_s, 4),
        "priced": "the run's hourly price: an estimate, not the bill",
    }


def lines(ledger: dict) -> list[str]:
    """The ledger as the run's closing summary prints it."""
    out = [f"ledger ({ledger['wall_s']:.1f} s, ${ledger['cost_usd']:.2f}; {ledger['priced']}):"]
    for row in ledger["phases"]:
        out.append(
            f"  {LABELS[row['phase']]:<46} {row['seconds']:>9.1f} s {row['share'] * 100:>5.1f}%  ${row['usd']:.2f}"
        )
    if not ledger.get("job_phases", True):
        out.append("  (the job reported no phases of its own: only the built-in ddp and fsdp jobs time theirs)")
    out.append(f"  goodput (compute / total): {ledger['goodput'] * 100:.1f}%")
    return out


def sent_events(record: dict) -> list[dict]:
    """What rank 0 sent, one event per attempt (the record's EVENT/<attempt> fields)."""
    return [v for k, v in sorted(record.items()) if k.startswith(f"{EVENT}/") and isinstance(v, dict)]


def against(estimate, ledger: dict) -> str | None:
    """The closing summary's line: the estimate `rayfleet run` made before the run (its record's `estimate`,
    scripts/rayfleet/targets/estimate.py), against what the run took; None without one."""
    expected = estimate.get("duration") if isinstance(estimate, dict) else None
    mean = expected.get("mean_s") if isinstance(expected, dict) else None
    if not isinstance(mean, int | float) or isinstance(mean, bool) or not math.isfinite(mean):
        return None
    cost = (estimate.get("cost") or {}).get("mean_usd") if isinstance(estimate.get("cost"), dict) else None
    cost = cost if isinstance(cost, int | float) and math.isfinite(cost) else 0.0
    return (
        f"estimate {mean / 60:.1f} min, ${cost:.2f}; actual {ledger['wall_s'] / 60:.1f} min, ${ledger['cost_usd']:.2f}"
    )


def of_lost(record: dict) -> dict | None:
    """A lost run's ledger (nobody followed it to its end): from its submission to the last time its job
    reported, the only end anyone saw; None without a recorded submission, or with phases that are no ledger."""
    started = record.get(SUBMITTED)
    if not isinstance(started, int | float) or isinstance(started, bool):
        return None
    sent = sent_events(record)
    reported = [e.get("reported") for e in sent if isinstance(e.get("reported"), int | float)]
    usd = (record.get("held") or {}).get("usd_per_hour") if isinstance(record.get("held"), dict) else 0.0
    try:
        return build(float(started), max([float(started), *reported]), sent, float(usd or 0.0))
    except (LedgerError, TypeError, ValueError):
        return None
