"""Recent runs, local and in S3: state, when, how long, where the results are.

    rayfleet runs [--limit 20] [--json] [--runs-dir runs]

Local runs are the directories under ./runs (recipe runs have run.json; runs of the jobs started directly
show what their files say). S3 runs are listed when `rayfleet deploy` has saved the outputs: run.json for
recipe runs, the trainer task's state for runs started with `rayfleet launch`.

A run whose record says PENDING, SUBMITTED or RUNNING while nobody follows it any more is LOST, here and
from then on in its run.json (`settle`): on ECS when its trainer task has stopped or ECS no longer knows
it, elsewhere when the submitter process that run.json names (`submitter`: host, pid, start time) is gone
from this host. A driver that can still act (an error, SIGTERM) writes FAILED or STOPPED itself
(rayfleet/recipes/job.py); this is for the one that cannot (SIGKILL, a lost instance).
"""

from __future__ import annotations

import json
import math
import sys
from datetime import UTC, datetime
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from rayfleet.core import ledger
from rayfleet.core.aws import Aws, MissingOutputs
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.core.ledger import LEDGER
from rayfleet.core.moved import gone as gone
from rayfleet.core.run_dir import LOCAL_RUNS, RunDir, list_runs, runs_root
from rayfleet.core.run_name import RULE, valid
from rayfleet.core.terminal import printable
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.tasks import task_state
from rayfleet.recipes.cost import attempt_started, cost_usd, spent_s
from rayfleet.recipes.submitter import now, submitter_gone


def _duration(record: dict) -> float | None:
    """The attempt in progress so far, else the last attempt's time as recorded."""
    if record.get("state") in ("RUNNING", "SUBMITTED"):
        start = attempt_started(record)
        return (datetime.now(UTC) - start).total_seconds() if start else None
    try:  # the record is job-writable: a value that is no number shows as "-"
        return float(record["duration_s"]) if record.get("duration_s") is not None else None
    except (TypeError, ValueError):
        return None


def _cost(record: dict) -> float | None:
    """Every attempt's time at the run's price, lost trainer tasks included: so far while it runs (a cost_usd
    there is an earlier attempt's), else as its end wrote it."""
    if record.get("state") in ("RUNNING", "SUBMITTED"):
        return cost_usd(record.get("held"), spent_s(record) + (_duration(record) or 0.0))
    if record.get("cost_usd") is not None:
        return record["cost_usd"]
    return cost_usd(record.get("held"), _duration(record))


MAX_ATTEMPTS_SHOWN = 20  # the record is job-writable: a forged list of thousands stays a few lines
MAX_REASON = 200


def _attempts(record: dict) -> list[dict]:
    """Each attempt of the record's: its number, state and why it was started (rayfleet/recipes/job.py), bounded
    and without control characters."""
    listed = record.get("attempts")
    if not isinstance(listed, list):
        return []
    shown = []
    for n, entry in enumerate(listed[-MAX_ATTEMPTS_SHOWN:], start=max(1, len(listed) - MAX_ATTEMPTS_SHOWN + 1)):
        entry = entry if isinstance(entry, dict) else {}
        reason = printable(str(entry.get("reason") or "submitted"))[:MAX_REASON]
        resumed = printable(str(entry["resumed_from"]))[:MAX_REASON] if entry.get("resumed_from") else None
        shown.append({"attempt": n, "state": printable(str(entry.get("state", "?"))), "reason": reason})
        shown[-1]["resumed_from"] = resumed
    return shown


def _resumed(attempt: dict) -> str:
    return f"; resumed from {attempt['resumed_from']}" if attempt.get("resumed_from") else ""


def _row(run: str, where: str, record: dict, results: str) -> dict:
    return {
        "run": run,
        "where": where,
        "group": record.get("group") if isinstance(record.get("group"), str) else None,  # where its workers ran
        "state": record.get("state", "?"),
        "attempts": _attempts(record),
        "started": str(record.get("submitted_at") or record.get("created_at") or record.get("launched_at") or ""),
        "duration_s": _duration(record),
        "cost_usd": _cost(record),
        "goodput": _ledger(record).get("goodput"),
        "ledger": _ledger(record) or None,  # --json: the whole ledger, phase by phase (rayfleet/core/ledger.py)
        "results": results,
    }


def _ledger(record: dict) -> dict:
    found = record.get(LEDGER)
    return found if isinstance(found, dict) else {}


FOLLOWED = ("PENDING", "SUBMITTED", "RUNNING")  # states that someone is meant to move on


def _trainer_task(ecs, out: Outputs, task_arn: str) -> dict | None:
    return next(iter(ecs.describe_tasks(cluster=out.cluster_name, tasks=[task_arn]).get("tasks", [])), None)


def settle(run_dir: RunDir, record: dict, ecs=None, out: Outputs | None = None) -> dict:
    """The record as it stands, LOST (and written so) when its follower is gone; see the module doc."""
    state = record.get("state")
    if state not in FOLLOWED:
        return record
    if record.get("task_arn"):
        if ecs is None or out is None:
            return record
        if state == "SUBMITTED" and not record.get("job_id"):  # `rayfleet launch`, or not yet run: the task's state
            return {**record, "state": task_state(ecs, out, record["task_arn"])}
        task = _trainer_task(ecs, out, record["task_arn"])
        if task is not None and task["lastStatus"] != "STOPPED":
            return record
        task_id = record["task_arn"].rsplit("/", 1)[-1]
        reason = (
            f"its trainer task {task_id} stopped: {task.get('stoppedReason') or 'no reason given'}"
            if task is not None
            else f"its trainer task {task_id} is gone (ECS no longer knows it)"
        )
    elif submitter_gone(record):
        who = record["submitter"]
        reason = f"its submitter (pid {who['pid']} on {who['host']}) is gone"
    else:
        return record
    current = run_dir.record()
    if current.get("state") != state:  # it moved on meanwhile: the writer's word wins
        return current
    lost_ledger = ledger.of_lost(current)  # every run that ends has a ledger, a lost one too
    return run_dir.send(  # a reader's finding: an event, never a write over the owner's run.json
        "lost",
        state="LOST",
        **({LEDGER: lost_ledger} if lost_ledger else {}),
        ended_at=now(),
        message=f"{reason} while the run was {state}; nobody follows its job any more, and driver.log "
        "holds the output up to its last upload",
    )


def local_runs(root: Path) -> list[dict]:
    rows = []
    for name in list_runs(str(root)):
        run_dir = RunDir(str(root), name)
        record = settle(run_dir, run_dir.record())
        if "state" not in record:  # a job run directly (make demo; run.json names at most its MLflow run)
            done = any((root / name).glob("checkpoint_*"))
            started = datetime.fromtimestamp((root / name).stat().st_mtime, UTC).isoformat(timespec="seconds")
            record = {**record, "state": "CHECKPOINTED" if done else "?", "created_at": started}
        rows.append(_row(name, "local", record, run_dir.url))
    return rows


def s3_runs(out: Outputs) -> list[dict]:
    """The deployment's runs (s3://<results bucket>/runs), newest first. A run whose record stops at
    SUBMITTED (a job launched without a recipe driver) takes its state from its trainer task; one whose
    follower is gone is LOST (`settle`)."""
    ecs = Aws(out.region).client("ecs")
    storage = runs_root(out.results_bucket)
    rows = []
    for name in list_runs(storage, out.region):
        run_dir = RunDir(storage, name, region=out.region)
        record = run_dir.record()
        if not record:
            continue
        if record.get("task_arn") and record.get("state") is None:
            record = {**record, "state": task_state(ecs, out, record["task_arn"])}
        record = settle(run_dir, record, ecs, out)
        rows.append(_row(name, "ecs", record, run_dir.url + "/"))
    return sorted(rows, key=lambda r: r["started"], reverse=True)


def locate(run: str, outputs: str | None = None, local_dir: str = LOCAL_RUNS) -> RunDir:
    """Where a run lives: ./runs/<run> when it ran here, else the deployment's s3://<bucket>/runs/<run>.
    ConfigError (exit 2) when neither has it, or when `run` is no run name (`..` would be ./runs itself)."""
    if not valid(run):
        raise ConfigError(f"{printable(run)!r} is no run name: {RULE}")
    local = Path(local_dir).resolve()
    if (local / run).is_dir():
        return RunDir(str(local), run)
    try:
        out = Outputs.load(outputs)
    except MissingOutputs:
        out = None
    if out is not None and out.results_bucket:
        found = RunDir(runs_root(out.results_bucket), run, region=out.region)
        if found.entries():
            return found
    raise ConfigError(f"no run named {run} in ./{local_dir} or the deployment's bucket (rayfleet runs lists them)")


def fmt_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def fmt_cost(usd: float | None) -> str:
    if usd is None:
        return "-"
    return f"${usd:,.2f}" if isinstance(usd, int | float) and math.isfinite(usd) else "?"  # a forged record


def fmt_goodput(goodput) -> str:
    """Compute's share of the run's time, from its ledger; "?" for a value no ledger writes (runs/ is the jobs')."""
    if goodput is None:
        return "-"
    ok = isinstance(goodput, int | float) and not isinstance(goodput, bool) and 0 <= goodput <= 1
    return f"{goodput * 100:.0f}%" if ok else "?"


def table(rows: list[dict]) -> str:
    """The rows for a terminal. A run's name (an S3 prefix), state and times come from what its job could
    write (runs/ is the task role's), so each field is shown without control characters: an escape sequence
    there would otherwise reach the operator's terminal (rayfleet/core/terminal.py)."""
    if not rows:
        return "no runs yet: rayfleet run recipes/ddp.yaml (or, in a checkout, make demo)"
    head = f"{'RUN':<34}{'WHERE':<7}{'GROUP':<12}{'STATE':<18}{'TRIES':<6}{'STARTED':<27}{'DURATION':<10}{'GOODPUT':<9}"
    head += f"{'COST':<10}"
    lines = [head + "RESULTS"]
    for r in rows:
        run, state, started, results = (printable(r[k]) for k in ("run", "state", "started", "results"))
        group = printable(r.get("group") or "-")[:11]
        when, cost = fmt_duration(r["duration_s"]), fmt_cost(r["cost_usd"])
        tries = str(len(r["attempts"]) or "-")
        cells = f"{run:<34}{r['where']:<7}{group:<12}{state:<18}{tries:<6}{started:<27}{when:<10}"
        cells += f"{fmt_goodput(r.get('goodput')):<9}{cost:<10}"
        lines.append(cells + results)
        # Every attempt after the first says why it was started: a resubmission is never silent.
        lines += [f"  attempt {a['attempt']} ({a['state']}): {a['reason']}{_resumed(a)}" for a in r["attempts"][1:]]
    return "\n".join(lines)


def show_runs(limit: int = 20, as_json: bool = False, local_dir: str = LOCAL_RUNS, outputs: str | None = None) -> int:
    """`rayfleet runs`: the most recent runs, local (`local_dir`) and in the deployment's bucket, newest first."""
    rows = local_runs(Path(local_dir).resolve())
    try:
        rows += s3_runs(Outputs.load(outputs))
    except MissingOutputs:
        pass  # nothing deployed: local runs only
    except (RayfleetError, BotoCoreError, ClientError) as exc:
        print(f"warning: S3 runs not listed: {exc}", file=sys.stderr)
    rows.sort(key=lambda r: r["started"], reverse=True)
    rows = rows[:limit]
    print(json.dumps(rows, indent=2) if as_json else table(rows))
    return 0
