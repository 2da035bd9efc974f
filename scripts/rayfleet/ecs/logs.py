"""A trainer task's log in CloudWatch Logs: read from a time on, or followed until the task stops (the ECS
primitive under `rayfleet logs`, `rayfleet run` and `rayfleet serve`)."""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime, timedelta

from rayfleet.core.aws import Aws
from rayfleet.core.errors import RayfleetError
from rayfleet.core.launch_queue import Launches
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.ecs.outputs import Outputs

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


def log_stream(out: Outputs, task_arn: str) -> str:
    """The trainer container's CloudWatch stream in that task (awslogs: prefix/container/task id)."""
    return f"{out.trainer_log_stream_prefix}/{out.trainer_container_name}/{task_arn.rsplit('/', 1)[-1]}"


def run_record(out: Outputs, run: str) -> dict:
    """The run's record (run.json) in the deployment's results bucket; says so when there is none."""
    record = RunDir(runs_root(out.results_bucket), run, region=out.region).record()
    if not record.get("task_arn"):  # a detached run the control task started (rayfleet/core/launch_queue.py)?
        pending = Launches.of_bucket(out.results_bucket).get(run)
        if pending is not None and pending.task_arn:
            return {**record, "task_arn": pending.task_arn, "log_stream": log_stream(out, pending.task_arn)}
        if pending is not None:
            raise RayfleetError(
                f"run {run} waits for a driver slot, so it has no log yet ({pending.why}; rayfleet queue)"
            )
        raise RayfleetError(f"no run {run} in {runs_root(out.results_bucket)}/ (rayfleet runs lists them)")
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
