"""Warm worker processes on the real local cluster (rayfleet/core/warm_workers.py): a rayfleet job's Ray Train
controller, helpers and workers are forks of their nodes' fork servers, with what a fresh worker has.

Proves what the fork server's own tests (tests/unit/node/test_warm_server.py, no Ray) cannot: that Ray starts
a rayfleet job's processes through the launcher, that Ray accepts a worker it did not start itself (its pid,
its process group) and kills it cleanly at the end without taking the fork server with it, and that every
node's server took part. One short run (2 workers, no training)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration
SERVER = "rayfleet.node.warm_server"


def server_pids(env: dict) -> dict[str, int]:
    """Each node's fork server, by the socket it serves (head, worker-1, worker-2)."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            words = (proc / "cmdline").read_bytes().decode().split("\0")
        except (OSError, ValueError):
            continue
        if SERVER in words and Path(words[-2]).parent.name.endswith("-warm"):
            found[Path(words[-2]).stem] = int(proc.name)
    state = json.loads((Path(env["RAYFLEET_STATE_DIR"]) / "cluster" / "state.json").read_text())
    return {name: pid for name, pid in found.items() if Path(f"{state['temp_dir']}-warm", f"{name}.sock").exists()}


def test_a_jobs_ray_train_processes_are_forks_of_their_nodes_fork_servers(cluster_env, tmp_path):
    servers = server_pids(cluster_env)
    assert sorted(servers) == ["head", "worker-1", "worker-2"]
    command = [sys.executable, str(REPO / "tests/integration/jobs/warm_job.py"), f"storage={tmp_path}"]
    result = subprocess.run(
        [*command, "run_name=warm"], env=cluster_env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "a fresh process for this worker" not in result.stdout + result.stderr
    ranks = [json.loads((tmp_path / f"facts-{rank}.json").read_text()) for rank in (0, 1)]
    # Each rank is a fork of its worker node's server (one rank per node), with rayfleet's worker env and
    # the thread count Ray gives a 1-CPU worker, as a fresh process would have.
    assert sorted(rank["parent"].split()[-1].rsplit("/", 1)[-1] for rank in ranks) == ["worker-1.sock", "worker-2.sock"]
    assert all(SERVER in rank["parent"] for rank in ranks)
    assert all(rank["threads"] == 1 and rank["print_patch"] == "0" for rank in ranks)
    # Ray Train's controller (on the driver's node: the head) and its helpers are forks too.
    actors = ranks[0]["actors"]
    for name in ("TrainController", "SynchronizationActor", "PlacementGroupCleaner", "RayTrainWorker"):
        assert SERVER in actors.get(name, ""), (name, actors)
    assert "head.sock" in actors["TrainController"]
    # Ray killed each finished worker's process group: its own, never the server's.
    assert server_pids(cluster_env) == servers
