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
- a running run is never preempted by a higher priority;
- a deployment's budget (`Budget`: so many dollars a calendar month, UTC, or in all) holds the first run
  whose projected cost (its `max_cost_usd`, or `max_hours` at its hourly price) would pass what is left:
  HELD, it steps aside, so the runs behind it may go, and it is judged again as the spending changes (a new
  month). Against the budget: the ledger its runs write when they end (`spent`), plus each running run's
  projected cost (reserved while it runs; what it has spent if more).

Every job may write under queue/, so a reader takes nothing there on trust (rayfleet/core/run_queue_checks.py):
an entry or ledger item its writer could not have written is ignored with its reason (one warning per reader;
`scan` returns them for `rayfleet queue`), an entry counts only while the run it names is alive (`Alive`, when
the reader knows), and a priority above the deployment's RAYFLEET_MAX_PRIORITY is clamped. A queue holding
garbage degrades to "that entry is ignored", never to "nothing runs".
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from rayfleet.core import run_queue_checks as checks
from rayfleet.core.bucket import QUEUE, QUEUE_LEDGER, below, folder
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue_checks import DEFAULT_MAX_PRIORITY, Alive
from rayfleet.core.terminal import printable

FOLDER = folder(QUEUE)
# inside the queue's folder (the task role may write there): one file per run that ended
LEDGER = below(QUEUE_LEDGER, QUEUE)
BUDGET_VAR = "RAYFLEET_QUEUE_BUDGET"  # "500/month" or "2000/total": the submitter's (the trainer task's on ECS)
PERIODS = ("month", "total")
STALE_S = 30.0  # an entry's job refreshes it every HEARTBEAT_S; this long without: the job is gone
HEARTBEAT_S = 5.0
PLACE_TIMEOUT_S = 180.0  # an admitted run that has placed no workers by then blocks nobody

WAITING, HELD, ADMITTED, RUNNING = checks.STATES


@dataclass(frozen=True)
class Budget:
    usd: float
    period: str = "month"

    @classmethod
    def parse(cls, text: str | None) -> Budget | None:
        """`500/month`, `2000/total` or `500` (a month); empty or unset: no budget. ValueError: one line."""
        if not (text or "").strip():
            return None
        amount, _, period = text.strip().partition("/")
        period = period.strip() or "month"
        try:
            usd = float(amount.strip().lstrip("$"))
        except ValueError:
            usd = -1.0
        if usd < 0 or period not in PERIODS:
            raise ValueError(f"{BUDGET_VAR}: {text!r} is not a budget: write 500/month or 2000/total (US dollars)")
        return cls(usd, period)

    def since(self, now: float) -> float:
        """When the period being spent began (epoch seconds): the first of this month (UTC), or ever."""
        if self.period == "total":
            return 0.0
        day = datetime.fromtimestamp(now, UTC)
        return datetime(day.year, day.month, 1, tzinfo=UTC).timestamp()

    def describe(self) -> str:
        return f"${self.usd:,.2f} {'a month' if self.period == 'month' else 'in all'}"


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
    usd_per_hour: float = 0.0  # what its workers cost while it runs (run.json's `held`)
    max_usd: float | None = None  # its projected cost: max_cost_usd, or max_hours at usd_per_hour; None: no bound
    max_hours: float | None = None  # the recipe's bound on its time, for the projected starts of the runs behind
    group: str = ""  # the worker group its workers go to ("": any node; core/worker_groups.py)

    def resources(self) -> str:
        gpus = f" + {self.gpus_per_worker} GPU" if self.gpus_per_worker else ""
        return f"{self.workers} x {self.cpus_per_worker:g} CPU{gpus}"

    def key(self) -> tuple:
        return (-self.priority, self.submitted_at, self.run)

    def spent_usd(self, now: float, since: float = 0.0) -> float:
        """What it has held since its admission, or since `since` if later (0 while it waits)."""
        if self.admitted_at is None or self.state not in (ADMITTED, RUNNING):
            return 0.0
        return self.usd_per_hour * max(0.0, now - max(self.admitted_at, since)) / 3600


@dataclass(frozen=True)
class Ignored:
    name: str  # the object's name under queue/
    reason: str  # why no reader counts it (one line)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Queue:
    """The entries of one cluster's queue (`root`: a local directory or s3://bucket[/prefix]). `max_priority`:
    the highest priority a reader lets an entry have (rayfleet/core/run_queue_checks.py); `warn`: where an
    ignored entry is said, once per reader."""

    def __init__(
        self,
        root: str,
        budget: Budget | None = None,
        max_priority: int = DEFAULT_MAX_PRIORITY,
        warn: Callable[[str], None] = _stderr,
    ):
        self.folder = RunDir(root, FOLDER)
        self.ledger = RunDir(f"{root.rstrip('/')}/{FOLDER}", LEDGER)  # {run, usd, admitted_at, ended_at} each
        self.budget, self.max_priority, self.warn = budget, max_priority, warn
        self._warned: set[Ignored] = set()

    @property
    def url(self) -> str:
        return self.folder.url

    def put(self, entry: Entry) -> None:
        self.folder.write(f"{entry.run}.json", json.dumps(asdict(entry), indent=2))

    def remove(self, run: str) -> None:
        self.folder.remove([f"{run}.json"])

    def get(self, run: str) -> Entry | None:
        """The run's entry as stored (checked, its times not against the clock); None: none, or not an entry."""
        try:
            return self._read(f"{run}.json", None)
        except checks.Invalid:
            return None

    def entries(self, now: float, alive: Alive | None = None) -> list[Entry]:
        """The entries that count (refreshed within STALE_S, valid, and of a live run when `alive` is given),
        in queue order: running and admitted runs first."""
        return self.scan(now, alive)[0]

    def scan(self, now: float, alive: Alive | None = None) -> tuple[list[Entry], list[Ignored]]:
        """`entries`, and the entries ignored with why (a stale entry is not among them: its job ended)."""
        live, ignored = [], []
        for name in self.folder.entries():
            if not name.endswith(".json"):
                continue
            try:
                entry = self._read(name, now)
            except checks.Invalid as exc:
                ignored.append(Ignored(name, str(exc)))
                continue
            if entry is not None and now - entry.heartbeat_at <= STALE_S:
                live.append(entry)
        for item in ignored:
            self._warn_once(item)
        live, dead = self._split(live, alive)
        return sorted(live, key=lambda e: (e.state in (WAITING, HELD), e.key())), ignored + dead

    def counting(self, entries: list[Entry], alive: Alive | None) -> list[Entry]:
        """Of `entries`, those of a live run (all of them when `alive` is None: not known); the others said."""
        return self._split(entries, alive)[0]

    def _split(self, entries: list[Entry], alive: Alive | None) -> tuple[list[Entry], list[Ignored]]:
        live, dead = [], []
        for entry in entries:
            why = alive.why_not(entry.run, entry.submission_id) if alive is not None else None
            if why:
                dead.append(Ignored(f"{entry.run}.json", why))
                self._warn_once(dead[-1])
            else:
                live.append(entry)
        return live, dead

    def _read(self, name: str, now: float | None) -> Entry | None:
        try:
            text = self.folder.read(name)
        except (ValueError, OSError):  # not UTF-8, a folder of that name
            raise checks.Invalid("not a readable file") from None
        if text is None:
            return None
        fields, note = checks.entry_fields(text, name, now, self.max_priority)
        if note:
            self._warn_once(Ignored(name, note))
        return Entry(**fields)

    def _warn_once(self, item: Ignored) -> None:
        if item not in self._warned:
            self._warned.add(item)
            self.warn(printable(f"[rayfleet] queue: {self.url}/{item.name} ignored: {item.reason}"))

    def record_spent(self, entry: Entry, now: float) -> None:
        """At a run's end, what it held, into the ledger (one file per run and admission: one writer each)."""
        if entry.admitted_at is None:
            return
        usd = entry.usd_per_hour * max(0.0, now - entry.admitted_at) / 3600
        body = {"run": entry.run, "usd": round(usd, 6), "admitted_at": entry.admitted_at, "ended_at": now}
        self.ledger.write(f"{entry.run}-{int(entry.admitted_at)}.json", json.dumps(body))

    def spent(self, since: float, now: float, entries: list[Entry] | None = None) -> float:
        """Dollars spent since `since`: the ledger's runs that ended since, and the live runs so far. A ledger
        item the budget code could not have written (checks.ledger_item) counts for nothing."""
        total = 0.0
        for name in self.ledger.entries():
            try:
                usd, ended_at = checks.ledger_item(self._ledger_text(name), name, now)
            except checks.Invalid as exc:
                self._warn_once(Ignored(f"{LEDGER}/{name}", str(exc)))
                continue
            if ended_at >= since:
                total += usd
        live = self.entries(now) if entries is None else entries
        return total + sum(e.spent_usd(now, since) for e in live)

    def _ledger_text(self, name: str) -> str | None:
        try:
            return self.ledger.read(name)
        except (ValueError, OSError):
            raise checks.Invalid("not a readable file") from None


def waiting(entries: list[Entry]) -> list[Entry]:
    """The runs in line, in order; a HELD run has stepped aside and is not among them."""
    return sorted((e for e in entries if e.state == WAITING), key=Entry.key)


def over_budget(entry: Entry, budget: Budget | None, spent: float) -> str | None:
    """Why the budget holds `entry` (one line), or None when it may go. ValueError (one line): a run that costs
    money with no bound of its own, which no budget can be checked against."""
    if budget is None:
        return None
    left = max(0.0, budget.usd - spent)
    if entry.max_usd is None:
        if entry.usd_per_hour <= 0:
            return None  # it costs nothing (a local cluster)
        raise ValueError(
            f"run {entry.run}: the queue has a budget ({budget.describe()}), so a run that costs money needs "
            "max_hours or max_cost_usd in its recipe: its cost is projected from them"
        )
    if entry.max_usd > left:
        return (
            f"held: its projected ${entry.max_usd:,.2f} would pass the ${left:,.2f} left of the queue's budget "
            f"of {budget.describe()}"
        )
    return None


def shares_workers(a: Entry, b: Entry) -> bool:
    """Do the two runs compete for the same nodes? Not when each is on a worker group of its own: every group
    has a line of its own (a run on no group may go anywhere, so it lines up with all)."""
    return not a.group or not b.group or a.group == b.group


def verdict(run: str, entries: list[Entry], now: float) -> tuple[bool, str]:
    """May `run` try to place its workers now; if not, why (one line, for its log and `rayfleet queue`). Only the
    runs that share its workers count (`shares_workers`): a full group holds back no run on another."""
    mine = next((e for e in entries if e.run == run), None)
    if mine is not None:
        entries = [e for e in entries if e.run == run or shares_workers(e, mine)]
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
