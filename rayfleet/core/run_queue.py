"""The cluster's run queue: which recipe runs wait for the cluster, in what order, and why.

The queue is a folder beside the runs (`<root>/queue/<run>.json`: the local cluster's state directory, or the
deployment's results bucket), so it outlives any process, the head included. Each entry has one writer, the
run's own job on the cluster (rayfleet/recipes/admission.py), which refreshes it every few seconds while it
waits and while it runs, and removes it when it ends; every other process only reads. An entry not refreshed
for STALE_S belongs to a job that is gone and counts for nothing.

The policy (`verdict`), the same for every run, so no dispatcher is needed to apply it:
- order: higher `priority` first (0-9), then the earlier submission, then the name;
- only the first waiting run may try to place its workers, and it places all of them or none (gang
  admission: the job asks Ray for its whole placement group, rayfleet/recipes/admission.py);
- no backfill: a run behind the first one waits even when it would fit, so a big run at the front is
  never starved by small ones behind it (to go first, a run is submitted with a higher priority);
- a run admitted a moment ago blocks the next one until Ray has placed its workers (PLACE_TIMEOUT_S at most),
  so two runs never race for the same free workers;
- a running run is never preempted by a higher priority.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from rayfleet.core.run_dir import RunDir

FOLDER = "queue"
STALE_S = 30.0  # an entry's job refreshes it every HEARTBEAT_S; this long without: the job is gone
HEARTBEAT_S = 5.0
PLACE_TIMEOUT_S = 180.0  # an admitted run that has placed no workers by then blocks nobody

WAITING, ADMITTED, RUNNING = "waiting", "admitted", "running"


@dataclass
class Entry:
    run: str
    priority: int
    submitted_at: float  # epoch seconds, when the submitter queued it
    workers: int
    cpus_per_worker: float
    gpus_per_worker: int = 0
    one_per_node: bool = False  # launcher recipes: one worker per node
    state: str = WAITING
    reason: str = ""
    heartbeat_at: float = 0.0
    admitted_at: float | None = None
    placed: bool = False  # Ray has placed the admitted run's workers
    submission_id: str = ""
    who: str = ""
    recipe: str = ""

    def resources(self) -> str:
        gpus = f" + {self.gpus_per_worker} GPU" if self.gpus_per_worker else ""
        return f"{self.workers} x {self.cpus_per_worker:g} CPU{gpus}"

    def key(self) -> tuple:
        return (-self.priority, self.submitted_at, self.run)


class Queue:
    """The entries of one cluster's queue (`root`: a local directory or s3://bucket[/prefix])."""

    def __init__(self, root: str):
        self.folder = RunDir(root, FOLDER)

    @property
    def url(self) -> str:
        return self.folder.url

    def put(self, entry: Entry) -> None:
        self.folder.write(f"{entry.run}.json", json.dumps(asdict(entry), indent=2))

    def remove(self, run: str) -> None:
        self.folder.remove([f"{run}.json"])

    def get(self, run: str) -> Entry | None:
        return _parse(self.folder.read(f"{run}.json"))

    def entries(self, now: float) -> list[Entry]:
        """The live entries (refreshed within STALE_S), in queue order: running and admitted runs first."""
        found = [_parse(self.folder.read(name)) for name in self.folder.entries() if name.endswith(".json")]
        live = [e for e in found if e is not None and now - e.heartbeat_at <= STALE_S]
        return sorted(live, key=lambda e: (e.state == WAITING, e.key()))


def _parse(text: str | None) -> Entry | None:
    if not text:
        return None
    try:
        return Entry(**json.loads(text))
    except (ValueError, TypeError):  # a file that is not an entry: ignored, never fatal to a listing
        return None


def waiting(entries: list[Entry]) -> list[Entry]:
    return sorted((e for e in entries if e.state == WAITING), key=Entry.key)


def verdict(run: str, entries: list[Entry], now: float) -> tuple[bool, str]:
    """May `run` try to place its workers now; if not, why (one line, for its log and `rayfleet queue`)."""
    for other in entries:
        placing = other.state == ADMITTED and not other.placed and now - (other.admitted_at or now) < PLACE_TIMEOUT_S
        if other.run != run and placing:
            return False, f"waiting for {other.run} to place its workers"
    queue = waiting(entries)
    names = [e.run for e in queue]
    if run not in names:
        return False, "not in the queue"
    position = names.index(run) + 1
    if position > 1:
        first = queue[0]
        return False, f"position {position} of {len(queue)}: behind {first.run} (priority {first.priority})"
    return True, f"first of {len(queue)} in the queue"
