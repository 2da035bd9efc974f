"""One recipe run as a Ray job: submit, follow, keep the record. Used where the job is submitted from:
`make run` for a local cluster, the trainer task on ECS (rayfleet/node/driver/recipe.py).

The job runs `recipe.command` in its unpacked code (`working_dir`: a local zip, or the zip's S3 URI), with
the RAYFLEET_* variables, the recipe's env and the recipe's pinned pip packages as Ray's per-job pip
environment. Secrets go as references only (RAYFLEET_SECRET_REFS); the entrypoint then starts with
`python -m rayfleet.recipes.job_entry`, which resolves them in the job's own process
(rayfleet/recipes/secrets.py). Its output is echoed as it comes and saved as driver.log in the run
directory as it is written (rayfleet/recipes/log_spool.py); run.json gets the job id, state, exit code, times
and who follows the job (`submitter`). A failure prints the traceback tail.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
import uuid

from rayfleet.core import stop_request, warm_workers
from rayfleet.core.errors import RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import admission, attempt_fence, budget, cost, jobs_api, ray_faults, run_ledger
from rayfleet.recipes.command import command, job_env, plain_env
from rayfleet.recipes.group_move import GroupMove
from rayfleet.recipes.log_spool import LogSpool
from rayfleet.recipes.notify import NOTIFY_VAR, TOPIC_VAR
from rayfleet.recipes.schema import Notify, Recipe
from rayfleet.recipes.secrets import REFS_VAR
from rayfleet.recipes.submitter import now, submitter

HEAD_LOST = "the head went away while the run waited in the queue"
SUBMITTER_STOPPED = "the submitter stopped"  # the record's message when the follower itself failed or was stopped
STOPPED_BY_A_SIGNAL = ("SIGTERM", "SIGINT", "KeyboardInterrupt")


def run_job(recipe: Recipe, run_dir: RunDir, **how) -> int:
    """Submit and follow; a failure whose exit code the recipe's `retries` allows is submitted again under the
    same run name, so the job resumes from its checkpoint, up to `retries.count` times. run.json's `attempts`
    lists every submission (and, on ECS, every trainer task that was lost: rayfleet/targets/run.py) with how it
    ended and why it was started (`reason`); they share the one count. A stop (Ctrl-C, SIGTERM, a budget) is
    never retried. Before any submission after the run name's first (a retry, a relaunched trainer, the name
    submitted again), the previous job's actors have ended (rayfleet/recipes/attempt_fence.py)."""
    attempts = list(run_dir.record().get("attempts") or [])
    reason = first_reason(run_dir.record(), attempts)
    ray_retried = False
    while True:
        attempt_fence.fence(run_dir, how.get("address"))
        run_dir.update(attempt_reason=reason, resumed_from=None)  # the job sends its own when it resumes
        exit_code, interrupted = _run_once(recipe, run_dir, **how)
        attempts.append(attempt_of(run_dir.record(), len(attempts) + 1))
        run_dir.update(attempts=attempts)
        fault = None if interrupted or ray_retried else ray_faults.fault(recipe, run_dir.record())
        if fault is not None:
            ray_retried = True  # once, and outside `retries`: the user's code did not fail
            if fault == ray_faults.SETUP_FAULT and "working_dir" in how:
                how = {**how, "working_dir": ray_faults.repackaged(how["working_dir"])}
            reason = f"{fault}: submitted once more under the same run name"
            print(f"[rayfleet] run {run_dir.run_name}: {reason}", flush=True)
            continue
        if interrupted or not recipe.retries.allows(exit_code) or len(attempts) - ray_retried > recipe.retries.count:
            return exit_code
        reason = f"retries: attempt {len(attempts)} ended with exit {exit_code}"
        print(
            f"[rayfleet] run {run_dir.run_name}: attempt {len(attempts)} ended with exit {exit_code}; retrying "
            f"(attempt {len(attempts) + 1} of {recipe.retries.count + 1 + ray_retried}) under the same run name, "
            "from its last checkpoint",
            flush=True,
        )


def first_reason(record: dict, attempts: list[dict]) -> str:
    """Why this process's first attempt starts: a trainer relaunched for a lost one, a name submitted again, or
    a first submission."""
    if attempts and attempts[-1].get("state") == "LOST":
        return f"relaunched: the trainer task of attempt {len(attempts)} was lost ({attempts[-1].get('why', '')})"
    submission = int(record.get("submission") or 1)
    if submission > 1:
        return f"submission {submission} of the run's name: resumes from its last checkpoint"
    return "submitted"


def attempt_of(record: dict, number: int) -> dict:
    """One entry of run.json's `attempts`: the submission and how it ended, from the record it left."""
    keys = ("job_id", "task_arn", "state", "exit_code", "submitted_at", "ended_at", "duration_s")
    resumed = record.get("resumed_from")  # the job's own event (rayfleet/train/ddp/report.py): a checkpoint's name
    return {
        "attempt": number,
        "reason": record.get("attempt_reason", "submitted"),
        **{k: record[k] for k in keys if record.get(k) is not None},
        **(
            {"resumed_from": str(resumed["checkpoint"])}
            if isinstance(resumed, dict) and "checkpoint" in resumed
            else {}
        ),
        "why": record.get("message", ""),
    }


def _run_once(recipe: Recipe, run_dir: RunDir, **how) -> tuple[int, str | None]:
    """One submission (keywords as `_submit_and_follow`). The job's output goes to driver.log as it comes
    (rayfleet/recipes/log_spool.py). SIGTERM stops the job and records STOPPED (exit 143); a submitter that
    raises still leaves run.json FAILED. One that is killed outright (SIGKILL, the task's instance lost)
    writes nothing: `make runs` and `make status` then mark the run LOST (rayfleet/ops/runs/__init__.py)."""
    spool = LogSpool(run_dir)
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return _submit_and_follow(recipe, run_dir, spool=spool, **how)
    except OSError as exc:
        if run_dir.record().get("state") != "QUEUED":
            _record_stopped(run_dir, spool, type(exc).__name__)
            raise
        spool.close()  # the head went away while the run waited: nothing of it ran, it keeps its place
        run_dir.update(message=HEAD_LOST)
        raise HeadLostWhileQueued(f"run {run_dir.run_name}: {HEAD_LOST} ({type(exc).__name__}: {exc})") from exc
    except BaseException as exc:
        _record_stopped(run_dir, spool, exc.signame if isinstance(exc, jobs_api.Terminated) else type(exc).__name__)
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        spool.close()


def _record_stopped(run_dir: RunDir, spool: LogSpool, why: str) -> None:
    try:
        spool.close()
    finally:
        run_dir.update(state="FAILED", ended_at=now(), message=f"{SUBMITTER_STOPPED} ({why}) before the job ended")


class HeadLostWhileQueued(RayfleetError):
    """The cluster's head went away while the run waited in its queue: on ECS the trainer rejoins the head and
    submits the run again in its place (rayfleet/node/ray_node.py, EXIT_HEAD_LOST)."""


def _on_sigterm(signum, frame) -> None:
    raise jobs_api.Terminated("SIGTERM")


def notify_env(recipe: Recipe, run_name: str) -> dict[str, str]:
    """What the job's process needs to notify (rayfleet/recipes/watch.py): the run's name and stall time, and
    the deployment's topic (this process's RAYFLEET_NOTIFY_TOPIC_ARN, from the trainer task on ECS). The
    webhook is a secret reference (Recipe.secret_refs). Nothing when neither is configured."""
    topic = os.environ.get(TOPIC_VAR)
    if recipe.notify is None and not topic:
        return {}
    stall = recipe.notify.stall_after_s if recipe.notify is not None else Notify().stall_after_s
    return {NOTIFY_VAR: json.dumps({"run": run_name, "stall_after_s": stall}), **({TOPIC_VAR: topic} if topic else {})}


def _submit_and_follow(
    recipe: Recipe,
    run_dir: RunDir,
    *,
    address: str,
    working_dir: str,
    extra_args: list[str],
    launch_dir: str,
    secret_refs: dict[str, str],
    spool: LogSpool,
    entrypoint_resources: dict | None = None,
    data: str | None = None,
    queue_root: str | None = None,
    move: GroupMove | None = None,
) -> tuple[int, str | None]:
    entry, runtime_env = _job_spec(
        recipe, run_dir, working_dir, extra_args, launch_dir, secret_refs, data, queue_root, move
    )
    stop_request.clear(run_dir)  # not the job's driver: it may start after the budget has already asked
    job_id = f"rayfleet-{run_dir.run_name}-{uuid.uuid4().hex[:6]}"  # a resumed run gets a new job
    client = jobs_api.client_for(address)
    started, began_at = time.monotonic(), time.time()
    if queue_root:  # before the job starts: its admission (an event) must come after this
        run_dir.update(state="QUEUED", job_id=job_id)
    jobs_api.submit(
        client,
        job_id=job_id,
        entrypoint=entry,
        runtime_env=runtime_env,
        metadata={"rayfleet_run": run_dir.run_name, "recipe": recipe.name},
        entrypoint_resources=entrypoint_resources,
    )
    run_dir.update(
        job_id=job_id,
        **({} if queue_root else {"state": "RUNNING"}),  # a queued job says when it is admitted (admission.py)
        entrypoint=entry,
        extra_args=extra_args,
        submitted_at=now(),
        submitter=submitter(),
    )
    print(f"[rayfleet] run {run_dir.run_name}: job {job_id} on {address}; results in {run_dir.url}", flush=True)
    record = run_dir.record()
    held = record.get("held") or {}
    spent = cost.spent_s(record)  # earlier attempts count too, lost trainer tasks included
    watch = budget.Budget(
        run_dir, budget.left(recipe.max_hours, recipe.max_cost_usd, record), lambda: client.stop_job(job_id)
    )
    try:
        outcome = jobs_api.follow(client, job_id, spool=spool, on_tick=watch.tick)
    finally:
        asked = stop_request.requested(run_dir)
        stop_request.clear(run_dir)  # consumed: a later resume of this run must not stop at once
    log_url = spool.close()
    exit_code, message = outcome.exit_code, outcome.message
    status = outcome.status
    if watch.reason and status == "SUCCEEDED":  # it checkpointed and ended as asked
        status, message = "STOPPED", watch.reason
    # checkpointed and ended, stopped after its grace or at a second cancel, or never admitted
    if asked in (stop_request.CANCELLED, stop_request.CANCELLED_NOW) and outcome.interrupted_by is None:
        status, message = "CANCELLED", stop_request.CANCELLED
        exit_code = exit_code or admission.EXIT_CANCELLED
    if outcome.interrupted_by == "SIGTERM":
        exit_code = 128 + signal.SIGTERM
        message = f"the submitter got SIGTERM and stopped the job ({outcome.status}). {message}".strip()
    duration_s = round(time.monotonic() - started, 1)
    run_dir.update(
        state=status,
        exit_code=exit_code,
        message=message,
        ended_at=now(),
        duration_s=duration_s,
        cost_usd=cost.cost_usd(held, spent + duration_s),
    )
    _say_how_it_ended(run_dir, outcome, exit_code, status, duration_s, cost.cost_usd(held, spent + duration_s), log_url)
    run_ledger.close(run_dir, began_at, held)
    return exit_code, outcome.interrupted_by


def _job_spec(
    recipe: Recipe,
    run_dir: RunDir,
    working_dir: str,
    extra_args: list[str],
    launch_dir: str,
    secret_refs: dict,
    data: str | None = None,
    queue_root: str | None = None,
    move: GroupMove | None = None,
) -> tuple[str, dict]:
    """The Jobs API entrypoint and runtime_env of a recipe's job (secret references only, never values); with
    a queue, the job waits its turn first (rayfleet/recipes/admission.py), and may move to `move`'s groups."""
    variables = job_env(recipe, run_dir.run_name, run_dir.storage, launch_dir, data)
    entry = command(recipe, sys.executable, variables, extra_args)
    # Ray Train moves its workers into a per-run directory unless told not to: recipe runs keep them in the
    # unpacked code, as the README promises, so `open("data/x")` in a train function works (a recipe may
    # set RAY_CHDIR_TO_TRIAL_DIR itself).
    env_vars = {"RAY_CHDIR_TO_TRIAL_DIR": "0", **variables, **plain_env(recipe, variables)}
    if secret_refs:  # references only: Ray logs, stores and serves runtime_env and the entrypoint
        env_vars[REFS_VAR] = json.dumps(secret_refs, sort_keys=True)
    env_vars.update(notify_env(recipe, run_dir.run_name))
    if secret_refs or NOTIFY_VAR in env_vars or queue_root:
        # The queue's entry goes on the job's own command line: every Ray worker of the job gets env_vars, and
        # a launcher's node (rayfleet/node/driver/launcher.py) starts through job_entry too; it must not queue.
        queued = _queued(recipe, run_dir, queue_root, move) if queue_root else []
        words = [sys.executable, "-m", "rayfleet.recipes.job_entry", *queued, entry]
        entry = shlex.join(words)
    runtime_env: dict = {"working_dir": working_dir, "env_vars": env_vars}
    if recipe.pip:  # its own virtualenv's interpreter: fresh worker processes
        runtime_env["pip"] = {"packages": list(recipe.pip), "pip_check": False}
    else:  # forked from the nodes' warm servers (rayfleet/core/warm_workers.py)
        runtime_env.update(warm_workers.runtime_env())
    return entry, runtime_env


def _queued(recipe: Recipe, run_dir: RunDir, queue_root: str, move: GroupMove | None = None) -> list[str]:
    """job_entry's --queue option: the run's entry at the hourly price run.json holds, the queue's budget. A
    submission queues at the time it first did: a retry, or a trainer relaunched after its head was lost,
    keeps its place (`queued`: the submission's number and time; a new submission of the name starts anew)."""
    record = run_dir.record()
    usd_per_hour = float((record.get("held") or {}).get("usd_per_hour") or 0.0)
    first = record.get("queued") or {}
    if first.get("submission") != record.get("submission") or "at" not in first:
        first = {"submission": record.get("submission"), "at": time.time()}
        run_dir.update(queued=first)  # this process follows the job: the record's owner, here and on ECS
    entry = admission.entry_for(recipe, run_dir.run_name, usd_per_hour=usd_per_hour, clock=lambda: first["at"])
    return ["--queue", admission.spec(queue_root, entry, admission.budget_from(os.environ, entry), move)]


def _say_how_it_ended(run_dir: RunDir, outcome, exit_code: int, status: str, duration_s: float, usd, log_url) -> None:
    if exit_code:
        reason = outcome.message.strip().splitlines()[0].rstrip(":,") if outcome.message.strip() else ""
        print(
            f"error: run {run_dir.run_name} {outcome.status.lower()} (exit {exit_code}): {reason}",
            file=sys.stderr,
        )
        print(outcome.traceback_tail(), file=sys.stderr)
        print(f"full log: {log_url}", file=sys.stderr)
    else:
        what = "stopped (its checkpoint is saved)" if status == "STOPPED" else "succeeded"
        print(
            f"[rayfleet] run {run_dir.run_name} {what} in {duration_s:.0f} s; "
            f"~${usd or 0:.2f}; results in {run_dir.url}",
            flush=True,
        )
