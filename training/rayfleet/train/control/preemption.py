"""Preemption inside a Ray Train loop: notice it at a step cadence, checkpoint at once, wait for the restart.

A node is preempted when it is drained with Ray's PREEMPTION reason and a deadline (on ECS the worker entry
point does it on the task's SIGTERM or the Spot two-minute notice: rayfleet/node/ray_node.py). Ray
Train 2.60 watches for drains of the run's nodes: `ray.train.get_preemption_info()` returns the notice on
every rank, and once the deadline passes Ray Train restarts the workers from the latest checkpoint on the
nodes that are left or have replaced it, counting the restart against
`FailureConfig.max_preemption_failures`, never `max_failures`.

So a loop asks every `every_steps` steps (a collective: every rank asks at the same steps), and on the first
notice saves a checkpoint through its usual path and then waits: a step taken after that checkpoint would
be thrown away by the restart. Caught that way, the restart redoes no step; a notice that arrives less than
a check interval before the deadline costs at most the steps since the last checkpoint.

Users' own Ray Train loops do the same in three lines (README, "Spot and preemption"):

    preemption = Preemption(every_steps=10)
    ...after each step, on every rank:
    if preemption.noticed(step):
        save_and_report_checkpoint(step)   # your usual ray.train.report(..., checkpoint=...)
        preemption.wait_for_restart()
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import ray.train

from rayfleet.core.run_dir import RunDir

# How long past the notice's deadline a worker waits before concluding that no restart is coming: the
# controller restarts at the deadline; a worker still alive long after it would otherwise hang the run.
RESTART_GRACE_S = 300.0
NO_DEADLINE_WAIT_S = 120.0  # Ray Train's own fallback when a drain names no deadline


REACHED_FILE = "reached.json"
# How often a loop that adapts its cadence asks: a Spot notice gives 120 s, and each ask is a barrier over
# every rank through Ray (milliseconds), which every 10 steps cost the DDP job a tenth of its 3 ms GPU steps.
CHECK_EVERY_S = 1.0


def steps_between_checks(configured: int, steps: float, seconds: float, every_s: float = CHECK_EVERY_S) -> int:
    """The steps between two asks so that they come about `every_s` apart, given that `steps` steps took
    `seconds`: a multiple of `configured`, never fewer (0, never, stays 0). Every rank must pass the same
    figures (from a collective) so that every rank asks at the same steps."""
    if configured <= 0 or steps <= 0 or seconds <= 0:
        return configured
    return configured * max(1, int(every_s * steps / seconds) // configured)


def record_reached(run_dir: RunDir, position: int) -> None:
    """Rank 0, at its progress cadence and at a preemption checkpoint: how far the run got (a job's own
    unit: FSDP's step, DDP's samples since the run began), so a restart can count the work it redoes."""
    run_dir.write(REACHED_FILE, json.dumps({"position": position}))


def redone_since(run_dir: RunDir, resumed: int) -> int:
    """The work between the checkpoint a restart resumes from and where the run had got, in the unit of
    record_reached: exact after a caught preemption (0), else at most one progress interval short."""
    text = run_dir.read(REACHED_FILE)
    return max(0, json.loads(text)["position"] - resumed) if text else 0


class NoRestart(RuntimeError):
    """The preemption notice's deadline passed long ago and the workers were not restarted."""


class Preemption:
    def __init__(
        self,
        every_steps: int,
        ask: Callable[[], object | None] = ray.train.get_preemption_info,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.every_steps, self.ask, self.clock, self.sleep = every_steps, ask, clock, sleep
        self.info = None

    def noticed(self, step: int) -> bool:
        """True once, at the first checked step after a node of the run was drained for preemption.
        Call it on every rank after every step: it asks Ray (a collective) only every `every_steps`."""
        if self.info is not None or self.every_steps <= 0 or step % self.every_steps:
            return False
        self.info = self.ask()
        return self.info is not None

    def deadline_s(self) -> float | None:
        """Seconds from now until the drained node goes, when the drain named a deadline."""
        deadline_ms = getattr(self.info, "deadline_ms", None)
        return None if not deadline_ms else deadline_ms / 1000 - self.clock()

    def describe(self) -> str:
        ranks = getattr(self.info, "preempted_ranks", [])
        left = self.deadline_s()
        when = f"in {left:.0f} s" if left is not None else "without a deadline"
        return f"preemption notice: rank(s) {ranks} on a node that goes {when}"

    def wait_for_restart(self) -> None:
        """After the checkpoint: idle until Ray Train tears this worker down at the deadline and restarts
        the run from that checkpoint. Raises NoRestart when that has not happened long after the deadline."""
        left = self.deadline_s()
        give_up = self.clock() + (NO_DEADLINE_WAIT_S if left is None else max(left, 0.0)) + RESTART_GRACE_S
        while self.clock() < give_up:
            self.sleep(1.0)
        raise NoRestart(f"{self.describe()}; no restart came {RESTART_GRACE_S:.0f} s after it")
