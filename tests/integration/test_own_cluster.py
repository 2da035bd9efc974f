"""A job started with no cluster running starts its own (same shape as make cluster-up) and stops it."""

from __future__ import annotations

import socket

import pytest

from tests.integration.conftest import run_ddp

pytestmark = pytest.mark.integration


def test_job_without_a_cluster_starts_and_stops_its_own(cluster_env, small_dataset, tmp_path):
    env = {k: v for k, v in cluster_env.items() if k != "RAY_ADDRESS"}
    env.update(RAYFLEET_STATE_DIR=str(tmp_path / "state"), RAYFLEET_RAY_PORT="6690", RAYFLEET_DASHBOARD_PORT="8465")
    result = run_ddp(
        env, f"data_dir={small_dataset}", f"storage={tmp_path}", "epochs=1", "train_subset=600", "run_name=own"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting a local one for this job" in result.stdout
    assert "cluster up: 1 head + 2 workers; RAY_ADDRESS=127.0.0.1:6690" in result.stdout
    assert (tmp_path / "own" / "checkpoint_000001").is_dir()
    assert not (tmp_path / "state" / "cluster" / "state.json").exists()  # stopped and cleared
    with socket.socket() as s:  # the GCS port is free again: nothing of that cluster is left listening
        s.bind(("127.0.0.1", 6690))
