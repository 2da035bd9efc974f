"""The library never starts a cluster; `rayfleet cluster run` (make demo, make train-ddp ON=local)
starts one for the job when none runs (same shape as rayfleet cluster up) and stops it after. With its GCS on a
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

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import Queue
from rayfleet.local import cluster as local_cluster
from rayfleet.recipes import jobs_api
from rayfleet.train.metrics import read_rows
from tests.integration.helpers import REPO, free_port
from tests.integration.run_attempts import RAY_LOST_THE_CODE, check_attempts

pytestmark = pytest.mark.integration

NEVER_REACHED = 100  # epochs: the head-loss run ends by a stop request
STOP_REASON = "asked by the test once the new head was up"


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
    assert lines[-1].startswith("error: no Ray cluster") and "rayfleet cluster run" in lines[-1], result.stderr
    assert "Traceback" not in result.stderr


def test_local_cluster_run_starts_a_cluster_whose_head_is_killed_and_replaced_mid_run(
    session_cluster_stopped, small_dataset, tmp_path
):
    """With no cluster running, `run --gcs-store` starts one (2 workers x 1 CPU, a head with none, its GCS in a real
    redis-server) for `make train-ddp`; the head is SIGKILLed in the run's second epoch and a new one starts on the
    same store (`replace-head`). The run has more epochs than it will ever reach: only once the new head is up does
    the test ask it to stop (the stop request a budget uses, core/stop_request.py), so it cannot end while its head
    is still being replaced, however slow the machine. Proves what no cheaper test can, on Ray 2.60 itself: the run
    goes on without a restart (every epoch once, attempt 0, no step redone), its follower rides out the head's
    absence, Ray's new head takes the job back (it ends SUCCEEDED through the new Jobs API), `rayfleet runs` lists
    one run. One known Ray fault is allowed, and then checked as exactly as the plain path: the new head's job
    monitor may fail the job on an RPC error of its own (ray-project/ray#65025, seen once in CI) and kill its
    driver; rayfleet then submits it once more and it resumes from its last checkpoint (each epoch still once); then
    `run` stops everything it started: state cleared, temp dir removed, nothing left listening (GCS and store ports
    free). The only test that starts a Ray cluster besides the session's: it runs last, after the session cluster is
    stopped (session_cluster_stopped), never beside it."""
    env = _own_cluster_env(session_cluster_stopped, tmp_path)
    storage = tmp_path / "runs"
    train = ["make", "--no-print-directory", "train-ddp", "ON=local", f"DATA_DIR={small_dataset}"]
    # 10 steps an epoch of 64 per worker (half the set: half the CPU of the whole); killed in epoch 2, stopped
    # by request after the replacement (never reaches its last epoch)
    args = f"ARGS=epochs={NEVER_REACHED} eval_batch_size=600 train_subset=1200 batch_size=64"
    train += [f"SET=storage={storage}", args, "NAME=headloss"]
    command = [sys.executable, "-m", "rayfleet.cli.main", "cluster", "run", "--workers", "2", "--cpus-per-worker", "1"]
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
            [sys.executable, "-m", "rayfleet.cli.main", "cluster", "replace-head"],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert replaced.returncode == 0 and "head replaced" in replaced.stdout, replaced.stdout + replaced.stderr
        epochs_before_stop = len(read_rows(run_dir))
        # asked again whenever it is gone: a resubmission (ray#65025, below) clears it before its new attempt
        while proc.poll() is None:
            assert time.monotonic() < deadline + 200, out_path.read_text()[-3000:]
            if stop_request.requested(run_dir) is None:
                stop_request.request(run_dir, STOP_REASON)
            time.sleep(0.5)
    finally:
        if proc.poll() is None:  # failed half way: stop the run and its cluster, and say what happened
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                subprocess.run(
                    [sys.executable, "-m", "rayfleet.cli.main", "cluster", "down"], env=env, cwd=REPO, timeout=120
                )
    output = out_path.read_text()
    assert proc.returncode == 0, output[-4000:]
    assert "GCS store: redis-server at 127.0.0.1:6698" in output
    assert "cluster up: 1 head + 2 workers; RAY_ADDRESS=127.0.0.1:6690" in output
    assert "the head's Jobs API does not answer" in output  # the follower saw the head go, and waited
    rows = read_rows(run_dir)
    record = json.loads((storage / "headloss" / "run.json").read_text())
    # each epoch once, and at least one ended after the new head was up: training went on across the loss
    assert [r["epoch"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) > epochs_before_stop, rows
    assert f"run headloss stopped early: {STOP_REASON}" in output
    assert record["state"] == "SUCCEEDED" and all(r["workers"] == 2 for r in rows), record
    if len(record["attempts"]) == 1:  # the path Ray means: nothing restarted
        assert all(r["attempt"] == 0 and r["steps_redone"] == 0 for r in rows), rows
        assert output.count("run headloss: 2 workers (CPU)") == 1  # the driver's output, shown once
    else:  # ray-project/ray#65025: one more submission, from the checkpoint, and no other
        assert [a["why"].startswith(jobs_api.MONITOR_RPC_FAILED) for a in record["attempts"]] == [True, False]
        assert "Ray's job monitor failed the job" in output and output.count("run headloss: 2 workers (CPU)") == 2
        assert [r["attempt"] for r in rows] == sorted(r["attempt"] for r in rows) and rows[-1]["attempt"] >= 1, rows
    listing = subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", "runs", "--runs-dir", str(storage), "--json"],
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


# A launcher recipe's script: says when it started, then holds its worker until the gate file exists (if named).
GATED = """
import json, os, sys, time
started, gate, run_dir = time.time(), (sys.argv[1:] or [None])[0], os.environ["RAYFLEET_RUN_DIR"]
open(os.path.join(run_dir, "started"), "w").close()
while gate and not os.path.exists(gate):
    time.sleep(0.2)
with open(os.path.join(run_dir, "times.json"), "w") as f:
    json.dump({"started": started, "ended": time.time()}, f)
"""


def submit_detached(env: dict, recipe, run: str, *args: str) -> None:
    argv = [sys.executable, "-m", "rayfleet.cli.main", "run", str(recipe), "--on", "local", "--name", run]
    done = subprocess.run([*argv, "--detach", "--", *args], env=env, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0 and "followed in the background" in done.stdout, done.stdout + done.stderr


def test_a_served_app_and_a_running_and_a_queued_run_outlive_a_head_replacement(
    ddp_basic, session_cluster_stopped, tmp_path
):
    """A cluster of its own on a store (`up --gcs-store`, 2 workers x 1 CPU), its head SIGKILLed and replaced
    (`replace-head`) while three things use it: the session's DDP run served (its replica on one worker), a
    `launcher: torchrun` run holding the other worker until a gate opens, and a run queued behind it. What no
    cheaper test shows, on Ray 2.60 itself: Serve's controller comes back with the new head from the store and
    the application answers again, key still required, nothing re-applied by rayfleet (on ECS without the
    store the control task applies the kept config: tests/unit/node/test_head_snapshot.py); the launcher run's
    node actor, owned by a driver attached to its own worker's raylet, lives on and its job ends SUCCEEDED in
    one attempt; the queued run waits through the replacement (its admission waits out the new head's state
    API) and starts only once the held worker is free. Runs after the session cluster is stopped, never beside
    it."""
    env = {**_own_cluster_env(session_cluster_stopped, tmp_path), "RAYFLEET_OUTPUTS": str(tmp_path / "none.json")}
    cli = [sys.executable, "-m", "rayfleet.cli.main", "cluster"]
    up = subprocess.run(
        [*cli, "up", "--workers", "2", "--gcs-store"], env=env, cwd=REPO, capture_output=True, text=True
    )
    assert up.returncode == 0, up.stdout + up.stderr
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "gated.py").write_text(GATED)
    storage, gate, recipe = tmp_path / "runs", tmp_path / "gate", tmp_path / "recipe.yaml"
    resources = {"workers": 1, "cpus_per_worker": 1}
    recipe.write_text(
        json.dumps(
            {"name": "gated", "code": "code", "entrypoint": "gated.py", "launcher": "torchrun", "storage": str(storage)}
            | {"resources": resources}
        )
    )
    queue = Queue(str(tmp_path / "state" / "cluster"))
    try:
        port = free_port()
        serve = [
            sys.executable,
            "-m",
            "rayfleet.cli.main",
            "serve",
            "up",
            "--run",
            "basic",
            "--runs-dir",
            str(ddp_basic["storage"]),
        ]
        served = subprocess.run(
            [*serve, "--set", f"port={port}", "--on", "local"], env=env, cwd=REPO, capture_output=True, text=True
        )
        assert served.returncode == 0, served.stdout[-2000:] + served.stderr[-2000:]
        key = (tmp_path / "state" / "serve" / "api_key").read_text().strip()
        image = {"images": [[[0] * 28] * 28]}
        assert classify(port, image, key) == 200
        submit_detached(env, recipe, "held", str(gate))
        wait_until(lambda: (storage / "held" / "started").exists(), 180, "the held run never started")
        submit_detached(env, recipe, "queued")
        # waiting in its job's own admission loop (its heartbeat), not only written by the submitter
        wait_until(lambda: getattr(queue.get("queued"), "heartbeat_at", 0) > 0, 120, "the run's job never queued")
        replaced = subprocess.run([*cli, "replace-head"], env=env, cwd=REPO, capture_output=True, text=True)
        assert replaced.returncode == 0 and "head replaced" in replaced.stdout, replaced.stdout + replaced.stderr
        wait_until(lambda: classify(port, image, key) == 200, 180, "the application never answered again")
        assert classify(port, image, None) == 401 and classify(port, image, key + "x") == 401
        assert not (storage / "queued" / "started").exists()  # its worker is still held
        gate.touch()
        done = ("SUCCEEDED", "FAILED", "STOPPED", "CANCELLED")
        wait_until(lambda: all(state(storage, run) in done for run in ("held", "queued")), 240, "the runs never ended")
    finally:
        subprocess.run([*cli, "down"], env=env, cwd=REPO, timeout=120)
    records = {run: json.loads((storage / run / "run.json").read_text()) for run in ("held", "queued")}
    assert {run: r["state"] for run, r in records.items()} == {"held": "SUCCEEDED", "queued": "SUCCEEDED"}, records
    check_attempts(records["held"], [("SUCCEEDED", 0)])  # not resubmitted: its job lived on
    check_attempts(records["queued"], [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)
    times = {run: json.loads((storage / run / "times.json").read_text()) for run in ("held", "queued")}
    assert times["held"]["ended"] <= times["queued"]["started"]  # admitted only once the worker was free
    for port_in_use in (6690, 6698):  # the GCS's and the store's
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port_in_use), timeout=5).close()


def state(storage, run: str) -> str | None:
    try:
        return json.loads((storage / run / "run.json").read_text())["state"]
    except (OSError, ValueError, KeyError):
        return None


def wait_until(what, deadline_s: float, why: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.5)


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
