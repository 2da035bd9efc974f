"""The library never starts a cluster; `python -m scripts.local_cluster run` (make demo, make train-ddp-local)
starts one for the job when none runs (same shape as make cluster-up) and stops it after."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def _own_cluster_env(cluster_env: dict, tmp_path) -> dict:
    env = {k: v for k, v in cluster_env.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    env.update(RAYFLEET_STATE_DIR=str(tmp_path / "state"), RAYFLEET_RAY_PORT="6690", RAYFLEET_DASHBOARD_PORT="8465")
    return env


def test_the_job_alone_says_how_to_get_a_cluster(cluster_env, small_dataset, tmp_path):
    job = [sys.executable, "-m", "training.ddp", f"data_dir={small_dataset}", f"storage={tmp_path}", "epochs=1"]
    result = subprocess.run(
        job, env=_own_cluster_env(cluster_env, tmp_path), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: no Ray cluster") and "scripts.local_cluster run" in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_local_cluster_run_starts_and_stops_a_cluster_for_the_job(cluster_env, small_dataset, tmp_path):
    env = _own_cluster_env(cluster_env, tmp_path)
    job = [sys.executable, "-m", "training.ddp", f"data_dir={small_dataset}", f"storage={tmp_path}", "epochs=1"]
    job += ["train_subset=600", "run_name=own"]
    command = [sys.executable, "-m", "scripts.local_cluster", "run", "--workers", "2", "--", *job]
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting one for this command" in result.stdout
    assert "cluster up: 1 head + 2 workers; RAY_ADDRESS=127.0.0.1:6690" in result.stdout
    assert (tmp_path / "own" / "checkpoint_000001").is_dir()
    assert not (tmp_path / "state" / "cluster" / "state.json").exists()  # stopped and cleared
    with socket.socket() as s:  # the GCS port is free again: nothing of that cluster is left listening
        s.bind(("127.0.0.1", 6690))
