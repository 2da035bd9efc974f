"""Runs waiting for a driver slot on ECS: the trainer tasks the head instance cannot hold yet.

On ECS each run's driver is a trainer task on the head instance, which holds Terraform's `concurrent_runs` of
them (infra/modules/ray/sizing.tf). When they are all taken, RunTask fails with RESOURCE:MEMORY; instead of
failing the run, `make run` keeps the RunTask request it made in `s3://<results bucket>/cluster/launches/<run>.json`
and the control task, beside the head, sends it again each round until ECS places it
(rayfleet/node/control/driver_dispatch.py). Its trainer then joins the run queue as any other run's does
(rayfleet/core/run_queue.py), so this is the step before the queue, in the same order: higher `priority`
first, then the earlier submission; only the first one is tried (no backfill).

Kept in cluster/, which the deployer and the control task write and no task a job can reach may write: a job
cannot forge a RunTask request that the control task's role would send. The control task writes only
`tries` and `why` of a request it tried, and moves a placed one, with `task_arn` and `started_at`, to
`launches/started/`; `make cancel` removes one not started yet.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from rayfleet.core.bucket import CLUSTER, LAUNCHES, LAUNCHES_STARTED, below, folder
from rayfleet.core.run_dir import RunDir

FOLDER = below(LAUNCHES, CLUSTER)  # in the control prefix, cluster/
STARTED = below(LAUNCHES_STARTED, LAUNCHES)  # in it: the launches ECS has placed


@dataclass
class Pending:
    run: str
    priority: int
    submitted_at: float  # epoch seconds
    request: dict  # RunTask's keyword arguments, as `make run` sent them
    task_arn: str | None = None  # set by the control task once ECS placed it
    started_at: float | None = None
    tries: int = 0
    why: str = ""  # the last refusal, as ECS gave it
    entry: dict = field(default_factory=dict)  # the run's queue entry-to-be (run_queue.Entry), for `make queue`

    def key(self) -> tuple:
        return (-self.priority, self.submitted_at, self.run)


class Launches:
    """The pending launches of one deployment (`bucket`, or any storage root for tests). A placed one moves to
    `started/`, so each round of the control task reads only the launches that still wait."""

    def __init__(self, root: str):
        self.folder = RunDir(f"{root.rstrip('/')}/{folder(CLUSTER)}", FOLDER)
        self.started = RunDir(self.folder.url, STARTED)

    @classmethod
    def of_bucket(cls, bucket: str) -> Launches:
        return cls(f"s3://{bucket}")

    @property
    def url(self) -> str:
        return self.folder.url

    def put(self, pending: Pending) -> None:
        self.folder.write(f"{pending.run}.json", json.dumps(asdict(pending), indent=2))

    def get(self, run: str) -> Pending | None:
        return parse(self.folder.read(f"{run}.json")) or parse(self.started.read(f"{run}.json"))

    def placed(self, pending: Pending) -> None:
        """ECS placed its trainer (`task_arn` set): kept under started/, where `make logs` finds the task."""
        self.started.write(f"{pending.run}.json", json.dumps(asdict(pending), indent=2))
        self.remove(pending.run)

    def remove(self, run: str) -> None:
        self.folder.remove([f"{run}.json"])

    def cancel(self, run: str) -> bool:
        """Remove a launch the control task has not placed yet: whether one was removed. (One placed meanwhile
        runs: its job sees the run's stop request, which `make cancel` writes too, and never starts.)"""
        pending = self.get(run)
        if pending is None or pending.task_arn:
            return False
        self.remove(run)
        return True

    def position(self, run: str) -> int | None:
        """1 for the next to be tried; None when it does not wait."""
        names = [p.run for p in self.waiting()]
        return names.index(run) + 1 if run in names else None

    def waiting(self) -> list[Pending]:
        """The launches not placed yet, the first to try first."""
        found = [parse(self.folder.read(name)) for name in self.folder.entries() if name.endswith(".json")]
        return sorted((p for p in found if p is not None and p.task_arn is None), key=Pending.key)


def parse(text: str | None) -> Pending | None:
    if not text:
        return None
    try:
        return Pending(**json.loads(text))
    except (TypeError, ValueError):  # not a launch of ours: ignored
        return None
