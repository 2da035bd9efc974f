"""Which runs have a live Ray job, for the run queue's admission (rayfleet/recipes/admission.py): an entry under
queue/ counts only while the run it names is alive (rayfleet/core/run_queue_checks.py `Alive`), so an entry a
job forged, or one its ended job left, cannot hold the runs behind it."""

from __future__ import annotations

import time
from collections.abc import Callable

from rayfleet.core.run_queue_checks import Alive

ALIVE_CHECK_S = 30.0  # how often Ray's job list is read again (the state API, through the head's dashboard)
ALIVE_RECHECK_S = 2.0  # ... and how soon, when an entry names a run the last list did not have (a new run)


def ray_jobs() -> list[dict]:
    """Ray's jobs with their status and metadata (the run's name: rayfleet/recipes/job.py), from the state API
    of the cluster this process's driver joined (`bare_driver`)."""
    from ray.util.state import list_jobs

    jobs = list_jobs(limit=10000, detail=True, raise_on_missing_output=False)
    return [
        j if isinstance(j, dict) else {k: getattr(j, k, None) for k in ("submission_id", "status", "metadata")}
        for j in jobs
    ]


class Liveness:
    """Which runs have a live Ray job, from Ray's job list: read at most every ALIVE_CHECK_S, and sooner (at
    most every ALIVE_RECHECK_S) when an entry names a run the last list did not have, a run submitted since.
    None while the list cannot be read (the head away): every fresh entry counts then, as with no check."""

    def __init__(
        self,
        say: Callable[[str], None] = print,
        list_jobs: Callable[[], list[dict]] = ray_jobs,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.say, self.list_jobs, self.clock = say, list_jobs, clock
        self.read_at, self.known, self.failed = -ALIVE_CHECK_S, None, False

    def __call__(self, names: set[str]) -> Alive | None:
        age = self.clock() - self.read_at
        unknown = self.known is None or not names <= set(self.known.runs)
        if age >= ALIVE_CHECK_S or (unknown and age >= ALIVE_RECHECK_S):
            self.read_at = self.clock()
            try:
                self.known, self.failed = Alive.of(self.list_jobs()), False
            except Exception as exc:  # the state API away a moment: no entry is dropped on a guess
                if not self.failed:
                    self.say(f"queue: could not read Ray's job list ({type(exc).__name__}): counting every fresh entry")
                self.known, self.failed = None, True
        return self.known
