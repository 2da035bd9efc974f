"""The DDP job on a real local Ray cluster: trains, checkpoints, refuses what cannot run. Its resumes: a run
resubmitted under its name (the rehearsal's replaced head, tests/integration/test_rehearsal.py), a node
preempted mid-epoch (tests/integration/test_preemption_on_local_cluster.py)."""

from __future__ import annotations

import re

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.train.checkpoint import read_state
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking.events import read_scalars
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
    assert all(r["attempt"] == 0 and r["steps_redone"] == 0 for r in rows)  # one attempt: Ray Train restarted nothing
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
    # The goodput ledger, from each phase's own timestamps: in the record, and last in the summary.
    ledger = RunDir(str(tmp_path), "basic").record()["ledger"]
    seconds = {r["phase"]: r["seconds"] for r in ledger["phases"]}
    assert all(
        seconds.get(p, 0) > 0 for p in ("run_start", "data", "model_load", "compute", "evaluation", "checkpoint")
    )
    assert seconds["unaccounted"] < 0.05 * ledger["wall_s"], ledger  # what no phase explains stays small
    assert sum(seconds.values()) == pytest.approx(ledger["wall_s"], abs=0.01)
    assert ledger["goodput"] == pytest.approx(seconds["compute"] / ledger["wall_s"], abs=1e-3)
    assert out.rstrip().splitlines()[-1] == f"  goodput (compute / total): {ledger['goodput'] * 100:.1f}%"


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
