"""One recipe run as a Ray job: submit, follow, keep the record. Used where the job is submitted from:
`make run` for a local cluster, the trainer task on ECS (scripts/recipe_driver.py).

The job runs `recipe.command` in its unpacked code (`working_dir`: a local zip, or the zip's S3 URI), with
the RAYFLEET_* variables, the recipe's env and the resolved secrets, and the recipe's pinned pip packages
as Ray's per-job pip environment. Its output is echoed as it comes and saved as driver.log in the run
directory; run.json gets the job id, state, exit code and times. A failure prints the traceback tail.
"""

from __future__ import annotations

import sys
import time
import uuid
from datetime import UTC, datetime

from scripts import ray_jobs
from scripts.recipe import Recipe, command, job_env, plain_env
from scripts.run_dir import RunDir


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def run_job(recipe: Recipe, run_dir: RunDir, **how) -> int:
    """Submit and follow (keywords as `_submit_and_follow`); a submitter that dies or raises still leaves
    run.json saying so, so no run stays RUNNING forever."""
    try:
        return _submit_and_follow(recipe, run_dir, **how)
    except BaseException:
        run_dir.update(state="FAILED", ended_at=now(), message="the submitter stopped before the job ended")
        raise


def _submit_and_follow(
    recipe: Recipe, run_dir: RunDir, *, address: str, working_dir: str, extra_args: list[str], launch_dir: str,
    secrets: dict[str, str], entrypoint_resources: dict | None = None,
) -> int:  # fmt: skip
    variables = job_env(recipe, run_dir.run_name, run_dir.storage, launch_dir)
    entry = command(recipe, sys.executable, variables, extra_args)
    runtime_env: dict = {"working_dir": working_dir, "env_vars": {**variables, **plain_env(recipe, variables),
                                                                  **secrets}}  # fmt: skip
    if recipe.pip:
        runtime_env["pip"] = {"packages": list(recipe.pip), "pip_check": False}
    job_id = f"rayfleet-{run_dir.run_name}-{uuid.uuid4().hex[:6]}"  # a resumed run gets a new job
    client = ray_jobs.client_for(address)
    started = time.monotonic()
    ray_jobs.submit(client, job_id=job_id, entrypoint=entry, runtime_env=runtime_env,
                    metadata={"rayfleet_run": run_dir.run_name, "recipe": recipe.name},
                    entrypoint_resources=entrypoint_resources)  # fmt: skip
    run_dir.update(job_id=job_id, state="RUNNING", entrypoint=entry, extra_args=extra_args, submitted_at=now())
    print(f"[rayfleet] run {run_dir.run_name}: job {job_id} on {address}; results in {run_dir.url}", flush=True)
    outcome = ray_jobs.follow(client, job_id)
    log_url = run_dir.write("driver.log", "".join(outcome.log))
    run_dir.update(state=outcome.status, exit_code=outcome.exit_code, message=outcome.message, ended_at=now(),
                   duration_s=round(time.monotonic() - started, 1))  # fmt: skip
    if outcome.exit_code:
        reason = outcome.message.strip().splitlines()[0].rstrip(":,") if outcome.message.strip() else ""
        print(f"error: run {run_dir.run_name} {outcome.status.lower()} (exit {outcome.exit_code}): {reason}",
              file=sys.stderr)  # fmt: skip
        print(outcome.traceback_tail(), file=sys.stderr)
        print(f"full log: {log_url}", file=sys.stderr)
    else:
        print(f"[rayfleet] run {run_dir.run_name} succeeded in {time.monotonic() - started:.0f} s; "
              f"results in {run_dir.url}", flush=True)  # fmt: skip
    return outcome.exit_code
