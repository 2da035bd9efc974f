"""A run's driver log from CloudWatch Logs: printed, or followed until the trainer task stops.

    rayfleet logs --run RUN [--since 10m] [--follow]

The run's task and log stream come from its record, `runs/<RUN>/run.json`, written by the launch verb. A local
recipe run (./runs/<RUN>/run.json) prints its driver.log, or its Jobs API log while it still runs.
"""

from __future__ import annotations

import time
from pathlib import Path

from rayfleet.core import ray_auth
from rayfleet.core.aws import Aws
from rayfleet.core.errors import EXIT_INTERRUPTED, RayfleetError
from rayfleet.core.moved import gone
from rayfleet.core.run_dir import LOCAL_RUNS, RunDir
from rayfleet.core.terminal import printable
from rayfleet.ecs.logs import LogReader, follow_task, parse_since, run_record
from rayfleet.ecs.outputs import Outputs


def local_run_log(run: str, follow: bool, runs_dir: str = LOCAL_RUNS) -> int | None:
    """A local recipe run's output: saved driver.log, or the Jobs API while it is queued or runs; None if not
    local. Following re-attaches: the output from the start, then as it comes, and the run's own exit code
    once its follower (`rayfleet run`, attached or detached) has recorded the end. Ctrl-C only stops reading."""
    from rayfleet.local import cluster as local_cluster
    from rayfleet.recipes import jobs_api

    run_dir = RunDir(str(Path(runs_dir).resolve()), run)
    record = run_dir.record()
    if record.get("target") != "local":
        return None
    cluster = local_cluster.running()
    if record.get("state") in ("QUEUED", "RUNNING") and cluster is not None and record.get("job_id"):
        client = jobs_api.client_for(cluster.dashboard_url)
        if not follow:
            print(client.get_job_logs(record["job_id"]), end="")
            return 0
        try:
            job_id = record["job_id"]
            while True:  # a retry of the run is a new job: followed too
                outcome = jobs_api.follow(client, job_id, stop_on_interrupt=False)
                record = _recorded_end(run_dir, job_id)
                if record.get("state") not in ACTIVE:
                    return int(record.get("exit_code", outcome.exit_code))
                if record.get("job_id") in (None, job_id):  # its follower is gone: the job's own code
                    return outcome.exit_code
                job_id = record["job_id"]
        except KeyboardInterrupt:
            print(f"\n[rayfleet] stopped following {run}; it goes on (rayfleet cancel --run {run} stops it)")
            return EXIT_INTERRUPTED
    text = run_dir.read("driver.log")
    if text is None:
        raise RayfleetError(
            f"run {run} has no driver.log yet and its job is not reachable (state {printable(record.get('state'))})"
        )
    print(text, end="")
    return 0


def _recorded_end(run_dir: RunDir, job_id: str, wait_s: float = 60.0) -> dict:
    """The record once the run's follower has ended (its record is then final) or has moved on to a retry's
    job; as it is after `wait_s` (a follower that still stops a cluster it started, or hangs)."""
    from rayfleet.recipes.submitter import submitter_gone

    deadline = time.monotonic() + wait_s
    record = run_dir.record()
    while time.monotonic() < deadline:
        if submitter_gone(record) or (record.get("job_id") != job_id and record.get("state") in ACTIVE):
            break
        time.sleep(0.5)
        record = run_dir.record()
    return record


ACTIVE = ("PENDING", "QUEUED", "RUNNING")


def show_logs(run: str, since: str | None = None, follow: bool = False, outputs: str | None = None) -> int:
    """`rayfleet logs --run RUN`: a run's driver log, local or from CloudWatch; `follow`: until the run ends."""
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    local = local_run_log(run, follow)
    if local is not None:
        return local
    out = Outputs.load(outputs)
    aws = Aws(out.region)
    record = run_record(out, run)
    since_ms = parse_since(since)
    if follow:
        return follow_task(aws, out, record["task_arn"], record["log_stream"], since_ms=since_ms)
    reader = LogReader(aws.client("logs"), out.trainer_log_group, record["log_stream"], since_ms)
    while events := reader.read():
        for event in events:
            print(event["message"])
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.runs.logs", "rayfleet logs --run RUN")
