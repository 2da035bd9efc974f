"""The DDP job on a real local Ray cluster: trains, checkpoints, resumes, refuses what cannot run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.train.checkpoint import read_state
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking.events import read_scalars
from tests.integration.helpers import REPO, train_worker_pids
from tests.integration.helpers import run_ddp as run

pytestmark = pytest.mark.integration


def small(data, storage, *extra):
    return [f"data_dir={data}", f"storage={storage}", "eval_batch_size=600", *extra]


def test_two_workers_learn_and_checkpoint(cluster_env, small_dataset, ddp_basic):
    result, tmp_path = ddp_basic["result"], ddp_basic["storage"]
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_rows(RunDir(str(tmp_path), "basic"))
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert rows[-1]["train_loss"] < rows[0]["train_loss"] * 0.7
    assert rows[-1]["test_accuracy"] > 0.5  # chance is 0.1
    assert all(r["workers"] == 2 and r["test_images"] == 600 for r in rows)
    run_dir = tmp_path / "basic"
    # keep_checkpoints=2: the last two epochs remain, with their state.
    assert sorted(p.name for p in run_dir.glob("checkpoint_0*")) == ["checkpoint_000002", "checkpoint_000003"]
    assert read_state(run_dir / "checkpoint_000003")["epoch"] == 3
    assert "epochs: 3" in (run_dir / "config.yaml").read_text()
    # One line per epoch (not one per rank), progress lines between them, and the summary.
    out = result.stdout
    assert [out.count(f"epoch {e}/3  train_loss") for e in (1, 2, 3)] == [1, 1, 1]
    progress = re.findall(r"epoch (\d)/3  step (\d+)/30  loss \S+  img/s \S+  elapsed \S+  remaining \S+", out)
    assert len(progress) >= 3, out  # an epoch takes several seconds here; progress_every_s=1
    steps = [int(step) for _, step in progress]
    assert steps == sorted(set(steps))  # rank 0 only: no line twice
    assert "test accuracy" in out and str(run_dir / "checkpoint_000003") in out
    # TensorBoard, read back with its own reader: the epoch scalars at each epoch's last step (10 steps an
    # epoch), the step loss and gradient norm every 5 steps; the curves PNG.
    scalars = read_scalars(run_dir / "tensorboard")
    assert scalars["test/accuracy"] == [(10 * r["epoch"], pytest.approx(r["test_accuracy"])) for r in rows]
    assert [step for step, _ in scalars["train/step_loss"]] == list(range(5, 31, 5))
    norms = scalars["train/grad_norm"]
    assert [step for step, _ in norms] == list(range(5, 31, 5)) and all(0 < norm < 1e3 for _, norm in norms)
    assert {"train/loss", "test/loss", "throughput/images_per_s", "lr", "memory/peak_gb"} <= set(scalars)
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"

    # Re-running the same run name resumes from its latest checkpoint instead of starting over.
    again = run(cluster_env, *small(small_dataset, tmp_path, "epochs=4", "run_name=basic"))
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming basic from the checkpoint of epoch 3" in again.stdout
    rows = read_rows(RunDir(str(tmp_path), "basic"))
    assert [(r["epoch"], r["attempt"]) for r in rows] == [(1, 0), (2, 0), (3, 0), (4, 1)]
    assert [step for step, _ in read_scalars(run_dir / "tensorboard")["test/accuracy"]] == [10, 20, 30, 40]


def test_killed_worker_resumes_from_last_checkpoint(cluster_env, small_dataset, tmp_path, monkeypatch):
    """Also with MLflow (its own file store): the restarted workers log into the same MLflow run."""
    mlflow_uri = (tmp_path / "mlruns").as_uri()
    env = {**cluster_env, "MLFLOW_TRACKING_URI": mlflow_uri, "MLFLOW_ALLOW_FILE_STORE": "true"}
    job = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.train.ddp", *small(small_dataset, tmp_path, "epochs=3", "run_name=fault")],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Registered, not merely written: Ray resumes only from checkpoints its controller has recorded.
        snapshot = tmp_path / "fault" / "checkpoint_manager_snapshot.json"
        deadline = time.monotonic() + 300
        while not (snapshot.exists() and "checkpoint_000001" in snapshot.read_text()):
            assert job.poll() is None, job.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no checkpoint within 300 s"
            time.sleep(0.2)
        victims = train_worker_pids(cluster_env)
        assert len(victims) == 2
        signal_sent_during_epoch = len(read_rows(RunDir(str(tmp_path), "fault")))
        os.kill(victims[0], signal.SIGKILL)
        out, err = job.communicate(timeout=600)
    finally:
        job.kill()
    assert job.returncode == 0, err[-3000:]
    assert signal_sent_during_epoch < 3  # the kill landed mid-run
    rows = read_rows(RunDir(str(tmp_path), "fault"))
    assert [r["epoch"] for r in rows] == [1, 2, 3]  # each epoch exactly once
    resumed = [r for r in rows if r["attempt"] >= 1]
    assert resumed, "the job never restarted"
    assert resumed[0]["epoch"] >= 2 and rows[0]["attempt"] == 0  # continued, did not start over
    assert "resuming fault from the checkpoint of epoch" in out
    # One MLflow run for the rayfleet run, across the restart: every epoch's accuracy (an epoch that ran
    # twice was logged twice: MLflow keeps history), the last value of each the one in metrics.jsonl;
    # FINISHED, with the last checkpoint as its artifact.
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # this process reads the store too
    client = MlflowClient(tracking_uri=mlflow_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rayfleet").experiment_id])
    assert run.info.run_id == RunDir(str(tmp_path), "fault").record()["mlflow_run_id"]
    assert run.info.run_name == "fault" and run.data.params["epochs"] == "3"
    assert run.info.status == "FINISHED", err[-3000:]  # the driver's close says why it could not, on stderr
    logged = sorted(client.get_metric_history(run.info.run_id, "test/accuracy"), key=lambda m: m.timestamp)
    history = {m.step: m.value for m in logged}  # the last value logged for each step
    assert history == {10 * r["epoch"]: pytest.approx(r["test_accuracy"]) for r in rows}
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["checkpoint_000003"]


def test_rejects_more_workers_than_the_cluster_can_place(cluster_env, small_dataset, tmp_path):
    result = run(cluster_env, *small(small_dataset, tmp_path, "num_workers=5", "run_name=toomany"), timeout=120)
    assert result.returncode == 2  # refused before anything ran (rayfleet.core.errors.EXIT_BAD_INPUT)
    assert "num_workers: 5 workers of 1 CPU each do not fit this cluster, which can place 2" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "toomany").exists()  # rejected before anything was written or started


def test_bad_config_fails_before_connecting(cluster_env, small_dataset, tmp_path):
    result = run(cluster_env, *small(small_dataset, tmp_path, "lr=-1", "epochs=zero"), timeout=60)
    assert result.returncode == 2  # refused before anything ran (rayfleet.core.errors.EXIT_BAD_INPUT)
    assert "lr: Input should be greater than 0" in result.stderr and "epochs:" in result.stderr
    assert "Traceback" not in result.stderr
