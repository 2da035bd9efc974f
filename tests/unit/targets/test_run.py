"""`rayfleet run`: a bad recipe fails the CLI before anything is written or a cluster starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.unit.recipes.helpers import GOOD, REPO, write


def test_bad_recipe_fails_the_cli_before_anything_is_written(tmp_path):
    path = write(tmp_path, {**GOOD, "pip": ["torch"]})
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAYFLEET_STATE_DIR": str(tmp_path / "state"),
        "RAYFLEET_OUTPUTS": str(tmp_path / "x.json"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", "run", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "'torch' is not pinned" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()  # no run, no cluster


def test_gpu_recipe_on_a_cpu_machine_fails_before_a_cluster_starts(tmp_path):
    path = write(tmp_path, {**GOOD, "resources": {"workers": 1, "gpus_per_worker": 2}})
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RAYFLEET_STATE_DIR": str(tmp_path / "state"),
        "RAYFLEET_OUTPUTS": str(tmp_path / "x.json"),
    }
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", "run", str(path), "--on", "local"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "gpus_per_worker: 2 GPUs, but a worker of this machine has 0" in result.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()


def test_a_run_name_that_is_not_a_plain_name_is_refused_in_one_line(tmp_path):
    """--run-name becomes a folder and an S3 prefix: `../x` or `a/b` is refused (exit 2) before anything runs
    (issue 27, low)."""
    path = write(tmp_path, GOOD)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAYFLEET_STATE_DIR": str(tmp_path / "state")}
    for name in ("../outside", "a/b", ".hidden"):
        result = subprocess.run(
            [sys.executable, "-m", "rayfleet.cli.main", "run", str(path), "--name", name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        last = result.stderr.strip().splitlines()[-1]  # after argparse's usage
        assert result.returncode == 2 and "argument --name" in last and "a run name is up to 100" in last, last
        assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()


def test_a_second_submission_of_a_queued_or_running_run_name_is_refused(tmp_path):
    from rayfleet.core.config import ConfigError
    from rayfleet.core.run_dir import RunDir
    from rayfleet.recipes.job import submitter
    from rayfleet.targets.base import refuse_active

    run_dir = RunDir(str(tmp_path), "r1")
    refuse_active(run_dir)  # a new name
    for state in ("QUEUED", "RUNNING"):
        run_dir.update(state=state, created_at="2026-11-26T10:00:00+00:00", submitter=submitter())
        with pytest.raises(ConfigError, match=f"run r1 is already {state} .*rayfleet cancel --run r1"):
            refuse_active(run_dir)
    gone = {**submitter(), "pid_start": "0"}  # the same pid, another process: its follower is gone
    run_dir.update(state="RUNNING", submitter=gone)
    refuse_active(run_dir)
    run_dir.update(state="CANCELLED", submitter=submitter())
    refuse_active(run_dir)  # an ended run's name may be reused: it resumes


def test_two_submissions_of_one_name_in_the_same_instant_one_is_refused(tmp_path):
    """The record is written after packaging, so two submitters reading it at once both found the name free;
    the numbered claim (a create-only write) lets one through. A submission that fails leaves no claim, and
    a killed submitter's stale claim is passed over."""
    import threading

    from rayfleet.core.config import ConfigError
    from rayfleet.core.run_dir import RunDir
    from rayfleet.recipes.job import submitter
    from rayfleet.targets.base import CLAIMS, claim

    run_dir = RunDir(str(tmp_path), "r1")
    start, won, refused = threading.Barrier(8), [], []

    def submit():
        start.wait()
        try:
            won.append(claim(run_dir))
        except ConfigError as exc:
            refused.append(str(exc))

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert won == [1] and len(refused) == 7
    assert "run r1 is being submitted right now" in refused[0] and "\n" not in refused[0]
    run_dir.update(state="SUCCEEDED", submission=1, submitter=submitter())  # it ran and ended: the name is free
    assert claim(run_dir) == 2
    killed = {"submitter": {**submitter(), "pid_start": "0"}, "at": 0}  # wrote its claim, then was killed
    run_dir.remove([f"{CLAIMS}/2.json"])
    run_dir.write(f"{CLAIMS}/2.json", json.dumps(killed))
    assert claim(run_dir) == 3


def test_a_submission_that_fails_while_packaging_gives_its_claim_back(tmp_path, monkeypatch):
    from rayfleet.core.run_dir import RunDir
    from rayfleet.recipes.package import PackageError
    from rayfleet.recipes.schema import load
    from rayfleet.targets import base

    def fails(*args, **kwargs):
        raise PackageError("code directory is 3 GiB")

    monkeypatch.setattr(base, "package", fails)
    run_dir = RunDir(str(tmp_path / "runs"), "r1")
    with pytest.raises(PackageError):
        base.package_into(load(write(tmp_path, GOOD)), run_dir, tmp_path, "local", [], {})
    assert not (tmp_path / "runs" / "r1" / base.CLAIMS / "1.json").exists() and run_dir.record() == {}
    assert base.claim(run_dir) == 1  # the next submission of the name goes through
