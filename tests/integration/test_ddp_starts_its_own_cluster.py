"""The library never starts a cluster; `python -m rayfleet.local run` (make demo, make train-ddp-local)
starts one for the job when none runs (same shape as make cluster-up) and stops it after. With its GCS on a
store (--gcs-store), a killed head is replaced and the run goes on."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.local import cluster as local_cluster
from rayfleet.recipes import jobs_api
from rayfleet.train.metrics import read_rows
from tests.integration.helpers import REPO, free_port

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


def test_local_cluster_run_starts_a_cluster_whose_head_is_killed_and_replaced_mid_run(
    session_cluster_stopped, small_dataset, tmp_path
):
    """With no cluster running, `run --gcs-store` starts one (2 workers x 1 CPU, a head with none, its GCS in a
    real redis-server) for `make train-ddp`; the head is SIGKILLed in the run's second epoch and a new one
    starts on the same store (`replace-head`). Proves what no cheaper test can, on Ray 2.60 itself: the run goes
    on without a restart (every epoch once, attempt 0, no step redone), its follower rides out the head's
    absence, Ray's new head takes the job back (it ends SUCCEEDED through the new Jobs API), `make runs` lists
    one run. One known Ray fault is allowed, and then checked as exactly as the plain path: the new head's job
    monitor may fail the job on an RPC error of its own (ray-project/ray#65025, seen once in CI) and kill its
    driver; rayfleet then submits it once more and it resumes from its last checkpoint (each epoch still once);
    then `run` stops everything it started: state cleared, temp dir removed, nothing left listening (GCS and
    store ports free). The only test that starts a Ray cluster besides the session's: it runs last, after the
    session cluster is stopped (session_cluster_stopped), never beside it."""
    env = _own_cluster_env(session_cluster_stopped, tmp_path)
    storage = tmp_path / "runs"
    train = ["make", "--no-print-directory", "train-ddp", "ON=local", f"DATA_DIR={small_dataset}"]
    # 10 steps an epoch of 64 per worker (half the set: half the CPU of the whole); killed in epoch 2 of 3
    args = "ARGS=epochs=3 eval_batch_size=600 train_subset=1200 batch_size=64"
    train += [f"SET=storage={storage}", args, "NAME=headloss"]
    command = [sys.executable, "-m", "rayfleet.local", "run", "--workers", "2", "--cpus-per-worker", "1"]
    out_path = tmp_path / "out"
    with open(out_path, "w") as out:
        proc = subprocess.Popen([*command, "--gcs-store", "--", *train], env=env, cwd=REPO, stdout=out, stderr=out)
    run_dir = RunDir(str(storage), "headloss")
    try:
        deadline = time.monotonic() + 400
        while not (storage / "headloss" / "metrics.jsonl").exists() or not read_rows(run_dir):
            assert proc.poll() is None and time.monotonic() < deadline, out_path.read_text()[-3000:]
            time.sleep(0.5)
        replaced = subprocess.run(
            [sys.executable, "-m", "rayfleet.local", "replace-head"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert replaced.returncode == 0 and "head replaced" in replaced.stdout, replaced.stdout + replaced.stderr
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:  # failed half way: stop the run and its cluster, and say what happened
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                subprocess.run([sys.executable, "-m", "rayfleet.local", "down"], env=env, cwd=REPO, timeout=120)
    output = out_path.read_text()
    assert proc.returncode == 0, output[-4000:]
    assert "GCS store: redis-server at 127.0.0.1:6698" in output
    assert "cluster up: 1 head + 2 workers; RAY_ADDRESS=127.0.0.1:6690" in output
    assert "the head's Jobs API does not answer" in output  # the follower saw the head go, and waited
    rows = read_rows(run_dir)
    record = json.loads((storage / "headloss" / "run.json").read_text())
    assert [r["epoch"] for r in rows] == [1, 2, 3], rows  # each epoch once
    assert record["state"] == "SUCCEEDED" and all(r["workers"] == 2 for r in rows), record
    if len(record["attempts"]) == 1:  # the path Ray means: nothing restarted
        assert all(r["attempt"] == 0 and r["steps_redone"] == 0 for r in rows), rows
        assert output.count("run headloss: 2 workers (CPU)") == 1  # the driver's output, shown once
    else:  # ray-project/ray#65025: one more submission, from the checkpoint, and no other
        assert [a["why"].startswith(jobs_api.MONITOR_RPC_FAILED) for a in record["attempts"]] == [True, False]
        assert "Ray's job monitor failed the job" in output and output.count("run headloss: 2 workers (CPU)") == 2
        assert [r["attempt"] for r in rows] == sorted(r["attempt"] for r in rows) and rows[-1]["attempt"] >= 1, rows
    listing = subprocess.run(
        [sys.executable, "-m", "rayfleet.ops.runs", "--local-dir", str(storage), "--json"],
        env={**env, "RAYFLEET_OUTPUTS": str(tmp_path / "none.json")},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [(r["run"], r["state"]) for r in json.loads(listing.stdout)] == [("headloss", "SUCCEEDED")]
    # `run` stopped what it started: the head, the workers and the store
    assert not (tmp_path / "state" / "cluster" / "state.json").exists()
    assert not (local_cluster.temp_root() / "6690").exists()
    for port in (6690, 6698):  # nothing listens on the GCS's and the store's ports any more
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()


def test_a_served_run_answers_again_after_its_head_is_replaced(ddp_basic, session_cluster_stopped, tmp_path):
    """A cluster of its own on a store (`up --gcs-store`, one worker), the session's DDP run served on it, its
    head SIGKILLed and replaced (`replace-head`): what no cheaper test shows, on Ray 2.60 itself: Serve's
    controller comes back with the new head from the store and the application answers again, with the key
    still required (a request without it: 401), with nothing re-applied by rayfleet. (On ECS without the
    store, the control task applies the kept config: tests/unit/node/test_head_snapshot.py.) Runs after the
    session cluster is stopped, never beside it."""
    env = _own_cluster_env(session_cluster_stopped, tmp_path)
    cli = [sys.executable, "-m", "rayfleet.local"]
    up = subprocess.run(
        [*cli, "up", "--workers", "1", "--gcs-store"], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        port = free_port()
        serve = [sys.executable, "-m", "rayfleet.ops.serve", "up", "basic", "--runs-dir", str(ddp_basic["storage"])]
        served = subprocess.run(
            [*serve, "--set", f"port={port}", "--target", "local"], env=env, cwd=REPO, capture_output=True, text=True
        )
        assert served.returncode == 0, served.stdout[-2000:] + served.stderr[-2000:]
        key = (tmp_path / "state" / "serve" / "api_key").read_text().strip()
        image = {"images": [[[0] * 28] * 28]}
        assert classify(port, image, key) == 200
        replaced = subprocess.run([*cli, "replace-head"], env=env, cwd=REPO, capture_output=True, text=True)
        assert replaced.returncode == 0 and "head replaced" in replaced.stdout, replaced.stdout + replaced.stderr
        deadline = time.monotonic() + 180
        while (status := classify(port, image, key)) != 200:
            assert time.monotonic() < deadline, f"still {status} after 180 s"
            time.sleep(1)
        assert classify(port, image, None) == 401 and classify(port, image, key + "x") == 401
    finally:
        subprocess.run([*cli, "down"], env=env, cwd=REPO, timeout=120)
    for port_in_use in (6690, 6698):  # the GCS's and the store's
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port_in_use), timeout=5).close()


def classify(port: int, body: dict, key: str | None) -> int | str:
    """The endpoint's HTTP status for one classification, or why there was none (the proxy away)."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/classify", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError as exc:
        return type(exc).__name__
