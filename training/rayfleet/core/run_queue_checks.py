"""What a reader of the run queue accepts (rayfleet/core/run_queue.py), and why it must check at all.

Every job may write under queue/ (the task role's prefixes, one role for every job), so an entry or a ledger
item is data a job could have forged, read by privileged processes (the control task raises the GPU workers
for it) and by every queued job's admission. Unchecked, one object could block every run forever (a heartbeat
or an admission dated in the future), keep the workers at their maximum, turn the queue's budget off (a
negative ledger item) or hold every run (a huge one), or crash each reader (a wrong type). So a reader:
- checks each field's type and bounds: whole numbers where the writer writes them, finite numbers, times no
  later than now (SKEW_S allowed for clocks a little apart), the run name by the run-name rule and equal to
  the file's own name; an entry that fails is ignored with its reason (never an exception in the reader);
- counts an entry only while the run it names is alive (`Alive`: its Ray job, or on ECS its trainer task),
  as far as the reader knows which runs are alive;
- clamps a priority above RAYFLEET_MAX_PRIORITY, an operator's setting (the control task's and the trainer
  task's environment, from Terraform), not the recipe's: default DEFAULT_MAX_PRIORITY, the recipe schema's
  highest, so a deployment that sets nothing keeps the recipes' 0-9 and only forged values are clamped;
- takes a ledger item only as the budget code writes it (`ledger_item`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from rayfleet.core import run_name, worker_groups

STATES = ("waiting", "held", "admitted", "running")
SKEW_S = 60.0  # how far another machine's clock may run ahead of the reader's
MAX_PRIORITY_VAR = "RAYFLEET_MAX_PRIORITY"
DEFAULT_MAX_PRIORITY = 9  # the recipe schema's highest priority
MAX_WORKERS, MAX_GPUS, MAX_CPUS = 512, 16, 1024.0  # the schema's bounds (cpus: the largest node there is)
MAX_USD_PER_HOUR = 10_000.0  # dozens of the largest GPU instances at on-demand prices
MAX_USD = 10_000_000.0
MAX_HOURS = 24.0 * 366
MAX_TEXT = 1000  # the longest reason, name or id the queue's writers write is a line
UNFINISHED_JOBS = ("PENDING", "RUNNING")
LEDGER_KEYS = {"run", "usd", "admitted_at", "ended_at"}


class Invalid(ValueError):
    """An object under queue/ that its writer could not have written: the reason, one line."""


def max_priority_from(env: Mapping[str, str]) -> int:
    """RAYFLEET_MAX_PRIORITY of `env` (a whole number 0-9); unset or not such a number: the default."""
    text = (env.get(MAX_PRIORITY_VAR) or "").strip()
    if text.isdigit() and int(text) <= DEFAULT_MAX_PRIORITY:
        return int(text)
    return DEFAULT_MAX_PRIORITY


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _number(data: dict, key: str, low: float, high: float, whole: bool = False) -> float:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or (whole and not isinstance(value, int)):
        raise Invalid(f"{key} {_show(value)} is not {'a whole number' if whole else 'a number'}")
    try:
        number = float(value)  # a whole number past a float's range (10**400) is refused here, not in a format
    except OverflowError:
        raise Invalid(f"{key} {_show(value)} is outside {low:g}..{high:g}") from None
    if not math.isfinite(number) or not low <= number <= high:
        raise Invalid(f"{key} {_show(value)} is outside {low:g}..{high:g}")
    return value


def _time(data: dict, key: str, now: float | None) -> float:
    """Epoch seconds, never later than now (a heartbeat from the future would never go stale)."""
    value = _number(data, key, 0.0, math.inf)
    if now is not None and value > now + SKEW_S:
        raise Invalid(f"{key} {value:.0f} is {value - now:.0f} s in the future")
    return value


def _text(data: dict, key: str) -> str:
    value = data[key]
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise Invalid(f"{key} {_show(value)} is not a line of text")
    return value


def _flag(data: dict, key: str) -> bool:
    if not isinstance(data[key], bool):
        raise Invalid(f"{key} {_show(data[key])} is not true or false")
    return data[key]


def _optional(data: dict, key: str, check) -> None:
    if data.get(key) is not None:
        check()


REQUIRED = ("run", "priority", "submitted_at", "workers", "cpus_per_worker")
OPTIONAL = (
    "gpus_per_worker", "one_per_node", "state", "reason", "heartbeat_at", "admitted_at", "placed",
    "submission_id", "who", "recipe", "usd_per_hour", "max_usd", "max_hours", "group",
)  # fmt: skip


def _document(text: str | None) -> dict:
    try:
        data = json.loads(text or "")
    except (ValueError, RecursionError):  # not JSON (not UTF-8 included: UnicodeDecodeError is a ValueError)
        raise Invalid("not JSON") from None
    if not isinstance(data, dict):
        raise Invalid("not a JSON object")
    return data


def entry_fields(text: str | None, name: str, now: float | None, max_priority: int) -> tuple[dict, str | None]:
    """The fields of the entry `text` read from queue/<name>, checked (Invalid: why not), and what the reader
    changed (a priority clamped), or None. `now` None: the times are not compared with the clock."""
    data = _document(text)
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    missing = [k for k in REQUIRED if k not in data]
    if unknown or missing:
        raise Invalid(f"not a queue entry: {'unknown' if unknown else 'missing'} {_show((unknown or missing)[0])}")
    run = _text(data, "run")
    if not run_name.valid(run) or name != f"{run}.json":
        raise Invalid(f"run {_show(run)} is not a run name, or not the file's name {_show(name)}")
    _number(data, "priority", 0, math.inf, whole=True)
    _time(data, "submitted_at", now)
    _number(data, "workers", 1, MAX_WORKERS, whole=True)
    if _number(data, "cpus_per_worker", 0.0, MAX_CPUS) <= 0:
        raise Invalid("cpus_per_worker 0 is outside 0..1024")
    _optional(data, "gpus_per_worker", lambda: _number(data, "gpus_per_worker", 0, MAX_GPUS, whole=True))
    for key in ("one_per_node", "placed"):
        _optional(data, key, lambda key=key: _flag(data, key))
    for key in ("reason", "submission_id", "who", "recipe"):
        _optional(data, key, lambda key=key: _text(data, key))
    group = data.get("group", "")
    if group != "" and not (isinstance(group, str) and worker_groups.NAME.fullmatch(group)):
        raise Invalid(f"group {_show(group)} is not a worker group's name")
    if data.get("state", STATES[0]) not in STATES:
        raise Invalid(f"state {_show(data['state'])} is not one of {', '.join(STATES)}")
    _optional(data, "heartbeat_at", lambda: _time(data, "heartbeat_at", now))
    _optional(data, "admitted_at", lambda: _time(data, "admitted_at", now))
    if data.get("state") == STATES[2] and not data.get("admitted_at"):  # it would block the queue for good
        raise Invalid(f"state {data['state']} without admitted_at")
    _optional(data, "usd_per_hour", lambda: _number(data, "usd_per_hour", 0.0, MAX_USD_PER_HOUR))
    _optional(data, "max_usd", lambda: _number(data, "max_usd", 0.0, MAX_USD))
    _optional(data, "max_hours", lambda: _number(data, "max_hours", 0.0, MAX_HOURS))
    note = None
    if data["priority"] > max_priority:
        note = f"priority {data['priority']} clamped to {max_priority} ({MAX_PRIORITY_VAR})"
        data["priority"] = max_priority
    return data, note


def ledger_item(text: str | None, name: str, now: float) -> tuple[float, float]:
    """A ledger item (queue/spent/<name>) as the budget code writes it (rayfleet/core/run_queue.py
    `record_spent`): its dollars and when its run ended. Invalid: an item that code could not have written."""
    data = _document(text)
    if set(data) != LEDGER_KEYS:
        raise Invalid(f"not a ledger item: its keys are not {', '.join(sorted(LEDGER_KEYS))}")
    run = _text(data, "run")
    admitted_at = _time(data, "admitted_at", now)
    ended_at = _time(data, "ended_at", now)
    if admitted_at <= 0 or not run_name.valid(run) or name != f"{run}-{int(admitted_at)}.json":
        raise Invalid(f"run {_show(run)} and its admission do not name the file {_show(name)}")
    if not 0 <= ended_at - admitted_at <= MAX_HOURS * 3600:  # a run lasts at most the schema's max_hours
        raise Invalid("ended before it was admitted, or ran longer than any run may")
    most = MAX_USD_PER_HOUR * (ended_at - admitted_at) / 3600
    usd = _number(data, "usd", 0.0, most + 1e-6)  # written rounded to 6 places
    return usd, ended_at


@dataclass(frozen=True)
class Alive:
    """The runs the reader knows to be alive: run name -> the Ray submission ids it has (empty: alive with no
    id known, e.g. its ECS trainer task). An entry counts only while its run is here."""

    runs: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, jobs: Iterable[Mapping] = (), trainer_runs: Iterable[str] = ()) -> Alive:
        """From Ray's job list (as the dashboard or the state API give it: submission_id, status, metadata
        with `rayfleet_run`, which the submitter sets: rayfleet/recipes/job.py) and the run names of the
        trainer tasks ECS runs."""
        runs: dict[str, set[str]] = {str(run): set() for run in trainer_runs}
        for job in jobs:
            status = job.get("status")
            metadata = job.get("metadata")
            if str(getattr(status, "value", status)) not in UNFINISHED_JOBS or not isinstance(metadata, Mapping):
                continue
            run = metadata.get("rayfleet_run")
            if isinstance(run, str):
                ids = runs.setdefault(run, set())
                if isinstance(job.get("submission_id"), str):
                    ids.add(job["submission_id"])
        return cls({run: frozenset(ids) for run, ids in runs.items()})

    def why_not(self, run: str, submission_id: str) -> str | None:
        """Why an entry of `run` (from Ray submission `submission_id`) does not count, or None when it does."""
        if run not in self.runs:
            return "its run has no live Ray job or trainer task"
        ids = self.runs[run]
        if submission_id and ids and submission_id not in ids:
            return f"its submission {_show(submission_id)} is not the run's live Ray job"
        return None
