"""The library never starts a cluster; `python -m rayfleet.local run` (make demo, make train-ddp-local)
starts one for the job when none runs (same shape as make cluster-up) and stops it after."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from rayfleet.local import cluster as local_cluster
from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def _own_cluster_env(cluster_env: dict, tmp_path) -> dict:
    env = {k: v for k, v in cluster_env.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    env.update(RAYFLEET_STATE_DIR=str(tmp_path / "state"), RAYFLEET_RAY_PORT="6690", RAYFLEET_DASHBOARD_PORT="8465")
    return env


def test_the_job_alone_says_how_to_get_a_cluster(cluster_env, small_dataset, tmp_path):
    job = [sys.executable, "-m", "rayfleet.train.ddp", f"data_dir={small_dataset}", f"storage={tmp_path}", "epochs=1"]
    result = subprocess.run(
        job, env=_own_cluster_env(cluster_env, tmp_path), cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("error: no Ray cluster") and "rayfleet.local run" in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


SHAPE = """
import ray
ray.init()
alive = [n for n in ray.nodes() if n["Alive"]]
cpus = sorted(n["Resources"].get("CPU", 0) for n in alive)
print(f"nodes {len(alive)} cpus {cpus}", flush=True)
"""


def test_local_cluster_run_starts_and_stops_a_cluster_for_the_job(session_cluster_stopped, tmp_path):
    """With no cluster running, `run` starts one of the asked shape (2 workers x 1 CPU, a head with none: what
    the command's own Ray driver sees), runs the command on it, then stops it: state cleared, its temp dir
    removed, nothing left listening. The only test that starts a Ray cluster besides the session's: it runs
    last, after the session cluster is stopped (session_cluster_stopped), never beside it. The command is a
    bare Ray driver: that the DDP job trains on a cluster of this shape, every other DDP test shows (and
    `make demo` runs it this way)."""
    env = _own_cluster_env(session_cluster_stopped, tmp_path)
    command = [sys.executable, "-m", "rayfleet.local", "run", "--workers", "2", "--cpus-per-worker", "1"]
    result = subprocess.run(
        [*command, "--", sys.executable, "-c", SHAPE], env=env, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting one for this command" in result.stdout
    assert "cluster up: 1 head + 2 workers; RAY_ADDRESS=127.0.0.1:6690" in result.stdout
    assert "nodes 3 cpus [0, 1.0, 1.0]" in result.stdout, result.stdout[-3000:]
    assert not (tmp_path / "state" / "cluster" / "state.json").exists()  # stopped and cleared
    assert not (local_cluster.temp_root() / "6690").exists()
    with socket.socket() as s:  # the GCS port is free again: nothing of that cluster is left listening
        s.bind(("127.0.0.1", 6690))
