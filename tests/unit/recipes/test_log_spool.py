"""The job's output spooled to disk and uploaded as it grows; the run record's submitter; LOST runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from rayfleet.core.run_dir import RunDir
from rayfleet.ops import runs
from rayfleet.recipes import submitter as follower
from rayfleet.recipes.log_spool import LogSpool


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_log_is_uploaded_when_due_and_at_the_end(tmp_path):
    run_dir, clock = RunDir(str(tmp_path), "r"), Clock()
    spool = LogSpool(run_dir, every_s=10, clock=clock)
    spool.write("one\n")
    assert run_dir.read("driver.log") is None  # not due yet
    clock.now = 10
    spool.tick()
    assert run_dir.read("driver.log") == "one\n"
    spool.write("two\n")
    assert run_dir.read("driver.log") == "one\n"  # the next one is due 10 s after the last
    clock.now = 20
    spool.tick()
    assert run_dir.read("driver.log") == "one\ntwo\n"
    spool.write("three\n")
    assert spool.close() == str(tmp_path / "r" / "driver.log")
    assert run_dir.read("driver.log") == "one\ntwo\nthree\n"
    assert not spool.directory.exists() and spool.close() == str(tmp_path / "r" / "driver.log")
    spool.tick()  # closed: nothing more


def test_a_live_submitter_is_not_gone_and_a_dead_one_is(tmp_path):
    assert not follower.submitter_gone({"submitter": follower.submitter()})
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = {**follower.submitter(), "pid": int(dead.stdout)}
    assert follower.submitter_gone({"submitter": gone})
    assert follower.submitter_gone({"submitter": {**follower.submitter(), "pid_start": "1"}})  # the pid, reused
    assert not follower.submitter_gone({"submitter": {**gone, "host": "another-host"}})  # not ours to judge
    assert not follower.submitter_gone({})


def test_a_running_local_run_without_its_submitter_is_lost(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    RunDir(str(tmp_path), "gone").update(state="RUNNING", submitter={**follower.submitter(), "pid": int(dead.stdout)})
    RunDir(str(tmp_path), "alive").update(state="RUNNING", submitter=follower.submitter())
    RunDir(str(tmp_path), "done").update(state="SUCCEEDED", submitter={**follower.submitter(), "pid": int(dead.stdout)})
    states = {r["run"]: r["state"] for r in runs.local_runs(tmp_path)}
    assert states == {"gone": "LOST", "alive": "RUNNING", "done": "SUCCEEDED"}
    record = RunDir(str(tmp_path), "gone").record()  # the listing's finding: an event beside the owner's run.json
    assert record["state"] == "LOST" and "is gone while the run was RUNNING" in record["message"]
    assert json.loads((tmp_path / "gone" / "run.json").read_text())["state"] == "RUNNING"


def test_handoff_passes_env_values_as_a_private_file_removed_after(monkeypatch):
    from rayfleet.recipes import secrets

    monkeypatch.setenv("PROBE_VALUE", "v4lue")
    refs = {"A": "env:PROBE_VALUE", "B": "secretsmanager:x/recipes/y"}
    with secrets.handoff(refs) as handed:
        path = handed["A"].removeprefix("file:")
        assert handed["B"] == refs["B"] and "v4lue" not in json.dumps(handed)
        assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        assert secrets.resolve({"A": handed["A"]}) == {"A": "v4lue"}
    assert not os.path.exists(path)


def test_job_entry_runs_the_command_with_the_values(tmp_path):
    (tmp_path / "A").write_text("from-a-file")
    env = {**os.environ, "RAYFLEET_SECRET_REFS": json.dumps({"TOKEN": f"file:{tmp_path / 'A'}"})}
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.recipes.job_entry", 'echo "$TOKEN" && exit 4'],
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 4 and result.stdout == "from-a-file\n"
    env["RAYFLEET_SECRET_REFS"] = json.dumps({"TOKEN": f"file:{tmp_path / 'missing'}"})
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.recipes.job_entry", "true"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 1 and "env.TOKEN: cannot read file:" in result.stderr
