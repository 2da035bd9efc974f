"""The local cluster's bookkeeping, with real processes standing in for Ray nodes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rayfleet.local import cluster as local_cluster


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _spawn(env_extra: dict, new_session: bool = False) -> subprocess.Popen:
    """A stand-in Ray process that ignores SIGTERM, returned once it does (its stdout says so)."""
    # The argv mentions "ray" like every Ray process does; the loop keeps it alive until killed.
    code = (
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ignoring', flush=True)\n"
        "while True: time.sleep(0.1)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "ray-stand-in"],
        env={**os.environ, **env_extra},
        start_new_session=new_session,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "ignoring\n"
    return proc


def test_spec_rejects_impossible_shapes():
    for bad in ({"workers": 0}, {"cpus_per_worker": 0}, {"port": 80}):
        with pytest.raises(local_cluster.ClusterError):
            local_cluster.ClusterSpec.from_env(**bad)


def test_down_stops_exactly_the_recorded_cluster_after_a_crash(state_dir):
    """A state file left by a crashed `up`: down finds the processes by their marker and session,
    escalates to SIGKILL for those that ignore SIGTERM, and leaves other processes alone."""
    ours_marked = _spawn({"RAYFLEET_CLUSTER_ID": "abc123"})
    ours_session = _spawn({}, new_session=True)  # like an agent whose renamed title wiped its environ
    stranger = _spawn({"RAYFLEET_CLUSTER_ID": "other"})
    try:
        state = local_cluster.ClusterState(
            cluster_id="abc123",
            address="127.0.0.1:1",
            dashboard_url="http://127.0.0.1:2",
            temp_dir=str(state_dir / "tmp"),
            log_dir=str(state_dir / "logs"),
            spec={},
            pids=[ours_session.pid],
        )
        local_cluster._write_state(state)
        assert sorted(local_cluster.find_cluster_pids("abc123", [ours_session.pid])) == sorted(
            [ours_marked.pid, ours_session.pid]
        )
        assert local_cluster.running() is not None
        assert local_cluster.down(quiet=True) == 2
        assert ours_marked.wait(timeout=5) == -9 and ours_session.wait(timeout=5) == -9
        assert stranger.poll() is None
        assert local_cluster.load_state() is None
        assert local_cluster.down(quiet=True) == 0  # idempotent
    finally:
        for proc in (ours_marked, ours_session, stranger):
            proc.kill()
            proc.wait()


def test_up_refuses_a_second_cluster(state_dir):
    proc = _spawn({"RAYFLEET_CLUSTER_ID": "live1"})
    try:
        local_cluster._write_state(
            local_cluster.ClusterState("live1", "127.0.0.1:6390", "http://x", str(state_dir / "t"), "", {}, [])
        )
        with pytest.raises(local_cluster.ClusterError, match="already running"):
            local_cluster.up(local_cluster.ClusterSpec(), quiet=True)
    finally:
        proc.kill()
        proc.wait()


def test_a_node_that_missed_rays_start_wait_restarts_the_cluster_once(monkeypatch, capsys):
    """Ray gives a new node 30 s to register (a constant of `ray start`); a busy machine can miss it. `up`
    starts the cluster again once for that error (its failed attempt stopped what it started), and for no
    other: a second miss, or any other failure, is the user's one-line error."""
    timed_out = local_cluster.ClusterError(
        f"head exited with code 1; log x:\nException: {local_cluster.RAY_START_TIMED_OUT}"
    )
    attempts = []

    def once(spec, quiet, outcomes):
        attempts.append(spec)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    outcomes = [timed_out, "started"]
    monkeypatch.setattr(local_cluster, "_up_once", lambda spec, quiet: once(spec, quiet, outcomes))
    assert local_cluster.up("spec") == "started" and len(attempts) == 2
    assert "starting the cluster again" in capsys.readouterr().out
    outcomes[:] = [timed_out, timed_out]
    with pytest.raises(local_cluster.ClusterError, match="timed out during startup"):
        local_cluster.up("spec")
    other = local_cluster.ClusterError("port(s) [6379] are in use")
    outcomes[:] = [other, "started"]
    attempts.clear()
    with pytest.raises(local_cluster.ClusterError, match="in use"):
        local_cluster.up("spec")
    assert len(attempts) == 1
