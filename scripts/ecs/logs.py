"""A run's driver log from CloudWatch Logs: printed, or followed until the trainer task stops.

    python -m scripts.ecs.logs RUN [--since 10m] [--follow]      # make logs RUN=ddp-20261122-101500

The run's task and log stream come from its record, `runs/<RUN>/run.json`, written by the launch verb. A local
recipe run (./runs/<RUN>/run.json) prints its driver.log, or its Jobs API log while it still runs.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from scripts.ecs.outputs import Outputs
from training.core import ray_auth
from training.core.aws import Aws, run_cli
from training.core.errors import RayfleetError
from training.core.run_dir import RunDir

_SINCE = re.compile(r"^(\d+)([smhd])$")


def parse_since(text: str | None) -> int | None:
    """'10m', '2h', '1d', '30s' or an ISO time -> epoch milliseconds."""
    if not text:
        return None
    match = _SINCE.match(text)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        delta = timedelta(**{{"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[unit]: amount})
        return int((datetime.now(UTC) - delta).timestamp() * 1000)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise RayfleetError(f"--since {text!r}: use 30s, 10m, 2h, 1d or an ISO time like 2026-11-22T10:00") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def run_record(out: Outputs, run: str) -> dict:
    """The run's record (run.json) in the deployment's results bucket; says so when there is none."""
    record = RunDir(f"s3://{out.results_bucket}/runs", run, region=out.region).record()
    if not record.get("task_arn"):
        raise RayfleetError(f"no run {run} in s3://{out.results_bucket}/runs/ (make runs lists them)")
    return record


class LogReader:
    """Pages through one stream, oldest first, remembering where it stopped."""

    def __init__(self, logs, group: str, stream: str, start_ms: int | None = None):
        self.logs, self.group, self.stream = logs, group, stream
        self.start_ms = start_ms
        self.token: str | None = None

    def read(self) -> list[dict]:
        kwargs = {"logGroupName": self.group, "logStreamName": self.stream, "startFromHead": True}
        if self.token:
            kwargs["nextToken"] = self.token
        elif self.start_ms is not None:
            kwargs["startTime"] = self.start_ms
        try:
            page = self.logs.get_log_events(**kwargs)
        except self.logs.exceptions.ResourceNotFoundException:
            return []  # the stream appears once the container writes its first line
        self.token = page.get("nextForwardToken", self.token)
        return page.get("events", [])


def follow_task(
    aws: Aws, out: Outputs, task_arn: str, stream: str, write=print, poll_s: float = 2.0, since_ms: int | None = None
) -> int:
    """Print the stream until the task stops; return the trainer container's exit code."""
    reader = LogReader(aws.client("logs"), out.trainer_log_group, stream, since_ms)
    ecs = aws.client("ecs")
    seen_status = None
    while True:
        for event in reader.read():
            write(event["message"])
        task = ecs.describe_tasks(cluster=out.cluster_name, tasks=[task_arn])["tasks"][0]
        if task["lastStatus"] != seen_status:  # progress while the image pulls and the task starts
            seen_status = task["lastStatus"]
            print(f"[rayfleet] trainer task is {seen_status}", file=sys.stderr, flush=True)
        if task["lastStatus"] == "STOPPED":
            while events := reader.read():  # what arrived while it stopped
                for event in events:
                    write(event["message"])
            container = next(c for c in task["containers"] if c["name"] == out.trainer_container_name)
            code = container.get("exitCode")
            if code is None:
                print(
                    f"error: the trainer task stopped without an exit code: {task.get('stoppedReason', '?')}",
                    file=sys.stderr,
                )
                return 1
            return int(code)
        time.sleep(poll_s)


def local_run_log(run: str, follow: bool, runs_dir: str = "runs") -> int | None:
    """A local recipe run's output: saved driver.log, or the Jobs API while it runs; None if not local."""
    from scripts.local_cluster import cluster as local_cluster
    from scripts.recipes import jobs_api

    run_dir = RunDir(str(Path(runs_dir).resolve()), run)
    record = run_dir.record()
    if record.get("target") != "local":
        return None
    cluster = local_cluster.running()
    if record.get("state") == "RUNNING" and cluster is not None and record.get("job_id"):
        client = jobs_api.client_for(cluster.dashboard_url)
        if follow:
            return jobs_api.follow(client, record["job_id"]).exit_code
        print(client.get_job_logs(record["job_id"]), end="")
        return 0
    text = run_dir.read("driver.log")
    if text is None:
        raise RayfleetError(
            f"run {run} has no driver.log yet and its job is not reachable (state {record.get('state')})"
        )
    print(text, end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    parser = argparse.ArgumentParser(prog="python -m scripts.ecs.logs", description=__doc__.split("\n")[0])
    parser.add_argument("run", help="run name (printed by the launch verb)")
    parser.add_argument("--since", help="only events after this: 30s, 10m, 2h, 1d or an ISO time")
    parser.add_argument("--follow", "-f", action="store_true", help="keep printing until the task stops")
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    args = parser.parse_args(argv)
    local = local_run_log(args.run, args.follow)
    if local is not None:
        return local
    out = Outputs.load(args.outputs)
    aws = Aws(out.region)
    record = run_record(out, args.run)
    since = parse_since(args.since)
    if args.follow:
        return follow_task(aws, out, record["task_arn"], record["log_stream"], since_ms=since)
    reader = LogReader(aws.client("logs"), out.trainer_log_group, record["log_stream"], since)
    while events := reader.read():
        for event in events:
            print(event["message"])
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
