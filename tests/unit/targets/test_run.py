"""`make run`: a bad recipe fails the CLI before anything is written or a cluster starts."""

from __future__ import annotations

import os
import subprocess
import sys

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
        [sys.executable, "-m", "rayfleet.targets.run", str(path)],
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
        [sys.executable, "-m", "rayfleet.targets.run", str(path), "--target", "local"],
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
            [sys.executable, "-m", "rayfleet.targets.run", str(path), "--run-name", name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        last = result.stderr.strip().splitlines()[-1]  # after argparse's usage
        assert result.returncode == 2 and "argument --run-name" in last and "a run name is up to 100" in last, last
        assert not (tmp_path / "runs").exists() and not (tmp_path / "state").exists()
