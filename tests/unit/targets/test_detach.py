"""Detach and Ctrl-C: a detached local run's follower goes on in the background (rayfleet/targets/detach.py), a
re-attached reader never stops the job (rayfleet/recipes/jobs_api.py), and Ctrl-C on an ECS `make run` cancels
the run checkpoint-first and follows it to its end (rayfleet/targets/ecs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from tests.unit.recipes.helpers import REPO

# The follower's part is played by a child that records itself as the submitter, as run_job does, then works on.
DETACHED = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from rayfleet.core.run_dir import RunDir
    from rayfleet.recipes.job import now, submitter
    from rayfleet.targets import detach

    run_dir = RunDir(sys.argv[1], "r")
    run_dir.update(state="PENDING", submitter=submitter())  # the submitter's package_into
    detach.background(run_dir, detach.log_path(run_dir, Path(sys.argv[1])))
    print("child: following", flush=True)
    if sys.argv[2] == "fail":
        print("error: the Jobs API refused it", file=sys.stderr, flush=True)
        sys.exit(3)
    time.sleep(0.5)
    run_dir.update(state="QUEUED", job_id="rayfleet-r-1", submitted_at=now(), submitter=submitter())
    gate = Path(sys.argv[1]) / "gate"  # the run ends when the test says so: after the detached parent returned
    while not gate.exists():
        time.sleep(0.1)
    run_dir.update(state="SUCCEEDED", exit_code=0)
""")


def detached(tmp_path, how: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", DETACHED, str(tmp_path), how]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)


def test_a_detached_run_returns_once_submitted_and_its_follower_goes_on(tmp_path):
    result = detached(tmp_path, "ok")  # returns although the run cannot end before the gate below opens
    assert result.returncode == 0, result.stderr
    assert "job rayfleet-r-1 submitted (queued)" in result.stdout and "rayfleet logs --run r -f" in result.stdout
    run_dir = RunDir(str(tmp_path), "r")
    assert run_dir.record()["state"] == "QUEUED"
    (tmp_path / "gate").touch()
    deadline = time.monotonic() + 20
    while run_dir.record()["state"] != "SUCCEEDED" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert run_dir.record()["state"] == "SUCCEEDED"  # the background follower recorded the end
    assert "child: following" in (tmp_path / "r" / "follower.log").read_text()


def test_a_detached_run_whose_follower_fails_before_submitting_exits_with_its_code_and_words(tmp_path):
    result = detached(tmp_path, "fail")
    assert result.returncode == 3
    assert "the Jobs API refused it" in result.stderr


class StoppingClient:
    """A Jobs API client whose log stream is interrupted by Ctrl-C."""

    def __init__(self):
        self.stopped: list[str] = []

    async def log_stream(self, job_id, node_id, follow):
        yield "step 1\n"
        if follow:
            raise KeyboardInterrupt

    def get_job_logs(self, job_id):
        return "step 1\n"

    def stop_job(self, job_id):
        self.stopped.append(job_id)

    def get_job_info(self, job_id):
        class Info:
            status, driver_exit_code, message = ("STOPPED" if self.stopped else "RUNNING"), None, ""
            driver_node_id = "n1"

        return Info()


def test_ctrl_c_stops_the_followed_job_but_not_a_reattached_one():
    from rayfleet.recipes import jobs_api

    client = StoppingClient()
    assert jobs_api.follow(client, "j", echo=lambda _: None, stream=client.log_stream).interrupted_by == "SIGINT"
    assert client.stopped == ["j"]
    reader = StoppingClient()
    with pytest.raises(KeyboardInterrupt):
        jobs_api.follow(reader, "j", echo=lambda _: None, stop_on_interrupt=False, stream=reader.log_stream)
    assert reader.stopped == []


def test_ctrl_c_on_an_ecs_run_cancels_it_checkpoint_first_and_follows_it_to_its_end(tmp_path, monkeypatch):
    from rayfleet.targets import ecs

    run_dir = RunDir(str(tmp_path), "r")
    calls: list[int | None] = []

    def follow_task(aws, out, task_arn, stream, since_ms=None):
        calls.append(since_ms)
        if len(calls) == 1:
            raise KeyboardInterrupt
        assert stop_request.requested(run_dir) == stop_request.CANCELLED  # asked before following on
        return 130

    monkeypatch.setattr(ecs, "follow_task", follow_task)
    record = {"task_arn": "arn:task/1", "log_stream": "s/1"}
    assert ecs.follow_or_cancel(None, None, run_dir, record) == 130
    assert calls[0] is None and calls[1] > 0  # the second read starts where the first stopped

    def twice(aws, out, task_arn, stream, since_ms=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(ecs, "follow_task", twice)
    with pytest.raises(KeyboardInterrupt):  # the second Ctrl-C only stops following
        ecs.follow_or_cancel(None, None, run_dir, record)
