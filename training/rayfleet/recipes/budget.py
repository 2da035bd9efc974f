"""A recipe's budget: `max_hours` and `max_cost_usd` become one time limit at submission (the run's hourly
price is known then: recipe resources x the catalog's on-demand price, or the Spot price, rayfleet/recipes/
cost.py). When the limit passes, the follower asks the job to stop cleanly (rayfleet/core/stop_request.py: the job
checkpoints, then ends) and the run record says STOPPED and why. A job that does not stop within the grace
period is stopped through the Jobs API. Earlier attempts of the run, lost trainer tasks included, have
used up part of the limit (`left`).

The same clock watches for `rayfleet cancel` (the request is the run directory's stop file, read every
CANCEL_POLL_S): a job that does not checkpoint and end within the grace period (a script that never reads
the request) is stopped through the Jobs API, and a second `rayfleet cancel` (stop_request.CANCELLED_NOW) stops it at
once."""

from __future__ import annotations

import time
from collections.abc import Callable

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import cost

GRACE_S = 600  # a DDP epoch or an FSDP logging interval, with its checkpoint
CANCEL_POLL_S = 5.0  # how often the follower reads the stop file (a GET in S3)


def limit_s(max_hours: float | None, max_cost_usd: float | None, usd_per_hour: float) -> tuple[float, str] | None:
    """The seconds the run may take, and what the limit is, or None without a budget."""
    limits = []
    if max_hours is not None:
        limits.append((max_hours * 3600, f"max_hours {max_hours:g}"))
    if max_cost_usd is not None and usd_per_hour > 0:
        limits.append(
            (max_cost_usd / usd_per_hour * 3600, f"max_cost_usd {max_cost_usd:g} at ${usd_per_hour:.2f}/hour")
        )
    return min(limits) if limits else None


def left(max_hours: float | None, max_cost_usd: float | None, record: dict) -> tuple[float, str] | None:
    """What is left of the run's limit for the attempt about to start: the limit at the run's hourly price
    (`held`) less the time of the attempts run.json already lists."""
    limit = limit_s(max_hours, max_cost_usd, (record.get("held") or {}).get("usd_per_hour", 0.0))
    return None if limit is None else (limit[0] - cost.spent_s(record), limit[1])


class Budget:
    def __init__(
        self, run_dir: RunDir, limit: tuple[float, str] | None, stop_job: Callable[[], None], clock=time.monotonic
    ):
        self.run_dir, self.limit, self.stop_job, self.clock = run_dir, limit, stop_job, clock
        self.started = clock()
        self.reason: str | None = None
        self.asked_at: float | None = None
        self.forced = False
        self.polled_at = float("-inf")

    def tick(self) -> None:
        self._watch_cancel()
        if self.asked_at is not None and not self.forced and self.clock() - self.asked_at > GRACE_S:
            self.forced = True
            print(f"[rayfleet] the job did not stop within {GRACE_S} s of the request: stopping it", flush=True)
            self.stop_job()
        if self.limit is None or self.reason is not None:
            return
        elapsed = self.clock() - self.started
        if elapsed >= self.limit[0]:
            self.reason = f"stopped by budget: {self.limit[1]} reached after {elapsed:.0f} s"
            self.asked_at = self.clock()
            print(f"[rayfleet] {self.reason}; asking the job to checkpoint and stop", flush=True)
            stop_request.request(self.run_dir, self.reason)

    def _watch_cancel(self) -> None:
        if self.forced or self.clock() - self.polled_at < CANCEL_POLL_S:
            return
        self.polled_at = self.clock()
        asked = stop_request.requested(self.run_dir)
        if asked == stop_request.CANCELLED_NOW:
            self.forced = True
            print("[rayfleet] cancelled again: stopping the job now", flush=True)
            self.stop_job()
        elif asked == stop_request.CANCELLED and self.asked_at is None:
            self.asked_at = self.clock()
            print(
                f"[rayfleet] cancel asked: the job checkpoints and ends (stopped after {GRACE_S} s if it does not; "
                "cancel again to stop it now)",
                flush=True,
            )
