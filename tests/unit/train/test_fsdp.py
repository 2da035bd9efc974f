"""The FSDP job's LR schedule, its logged-step metrics read from device tensors once, the order of its
checkpoint calls at a logged step, and its loop itself (`run_loop`) through a preemption notice and the restart
after it (in a plain one-process gloo group; Ray Train's worker API stood in for through Ray's local-mode seam)."""

from __future__ import annotations

import itertools
import json
import math
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import ray.train
import torch
import torch.distributed as dist
from ray.train import ReportedCheckpoint, ReportedCheckpointStatus
from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils, set_train_fn_utils

from rayfleet.core import ledger, stop_request
from rayfleet.core.config import load_config
from rayfleet.core.run_dir import RunDir
from rayfleet.train import fsdp
from rayfleet.train.control.hang_watch import Steps
from rayfleet.train.control.preemption import Preemption
from rayfleet.train.control.run_control import RunControl
from rayfleet.train.data import synthetic_text
from rayfleet.train.fsdp import _boundary, _train_step, lr_at
from rayfleet.train.fsdp.config import FSDPConfig
from rayfleet.train.fsdp.metrics import step_metrics, window
from rayfleet.train.fsdp.worker import Worker
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking.scalars import Target
from tools import tiny_lm


def cfg(*overrides: str) -> FSDPConfig:
    return load_config(FSDPConfig, "rayfleet/train/configs/fsdp.yaml", list(overrides))


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path_factory.mktemp('pg')}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_lr_warms_up_then_decays_by_cosine_to_the_floor():
    c = cfg("lr=0.001", "warmup_steps=10", "max_steps=110", "min_lr_ratio=0.1")
    assert lr_at(c, 0) == pytest.approx(1e-4) and lr_at(c, 9) == pytest.approx(1e-3)
    assert lr_at(c, 60) == pytest.approx(0.55e-3)  # half way down the cosine
    assert lr_at(c, 110) == pytest.approx(1e-4) and lr_at(c, 500) == pytest.approx(1e-4)


def test_async_checkpoint_is_on_by_default_and_can_be_turned_off():
    assert cfg().async_checkpoint is True and cfg("async_checkpoint=false").async_checkpoint is False
    assert cfg().reshard_after_forward is None and cfg("reshard_after_forward=false").reshard_after_forward is False


class FakeStrategy:
    """Records what the loop asks of a strategy; returns a device tensor as the loss and the norm."""

    def __init__(self):
        self.calls = []

    def set_lr(self, lr):
        pass

    def micro_step(self, batch):
        self.calls.append("micro_step")
        return torch.tensor(2.0)

    def step(self):
        return torch.tensor(0.5)

    def finish_checkpoint(self, wait=True):
        self.calls.append(("finish", wait))
        return {"checkpoint_step": 10, "checkpoint_write_s": 3.0, "checkpoint_wait_s": 0.0} if wait else {}

    def save(self, step, train_state, metrics, *, blocking=False):
        self.calls.append(("save", step, sorted(metrics)))


class Blocks:
    def micro_batch(self, step, micro, rank, world, seed, micro_batch, grad_accum):
        return torch.zeros(micro_batch, 8, dtype=torch.long)


def test_a_train_step_keeps_the_loss_sum_on_the_device():
    strategy = FakeStrategy()
    loss_sum, tokens, norm = _train_step(
        strategy, Blocks(), cfg("micro_batch_size=2", "grad_accum=3"), 0, 0, 1, torch.device("cpu"), 0.0, 0
    )
    assert isinstance(loss_sum, torch.Tensor) and loss_sum.item() == 6.0 and tokens == 3 * 2 * 8
    assert isinstance(norm, torch.Tensor) and strategy.calls == ["micro_step"] * 3


def test_step_metrics_read_device_tensors_with_one_copy_to_the_host(group, monkeypatch):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate

    norm = DTensor.from_local(torch.tensor(1.5), init_device_mesh("cpu", (1,)), [Replicate()])  # FSDP2's kind
    info = {"steps": 5, "flops_per_token": 1e9, "peak": None}
    reads, tolist = [], torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append("tolist") or tolist(self))
    monkeypatch.setattr(torch.Tensor, "item", lambda self: reads.append("item"))
    row = step_metrics(cfg("grad_accum=2"), info, torch.tensor(30.0), 1000, 2.0, torch.device("cpu"), 1, norm)
    assert reads == ["tolist"]
    assert row == {
        "grad_norm": 1.5,
        "loss": 3.0,  # 30 / (1 rank x 2 micro-batches x 5 steps)
        "tokens_per_s": 500.0,
        "tokens_per_s_per_device": 500.0,
        "tflops_per_device": 0.5,
        "mfu": None,
        "peak_memory_gib": None,
    }
    monkeypatch.undo()
    assert math.isnan(step_metrics(cfg(), info, 10.0, 10, 1.0, torch.device("cpu"), 1)["grad_norm"])  # none yet
    assert window(torch.tensor(12.0), 100, time.perf_counter() - 1, 3, cfg("grad_accum=2"))["loss"] == "2.0000"


def control(tmp_path, last: int = 30) -> RunControl:
    return RunControl(RunDir(str(tmp_path), "run"), 0, torch.device("cpu"), Preemption(0), 20, last)


def test_a_logged_step_reports_a_written_checkpoint_and_saves_none_when_none_is_due(group, tmp_path):
    strategy, row = FakeStrategy(), {"step": 10, "loss": 1.0}
    decision = _boundary(strategy, control(tmp_path), row, {"attempt": 0}, 30)
    assert strategy.calls == [("finish", False)] and not decision.save and row == {"step": 10, "loss": 1.0}


def test_a_due_checkpoint_finishes_the_last_one_first_and_records_its_pause(group, tmp_path):
    strategy, row = FakeStrategy(), {"step": 20, "loss": 1.0}
    decision = _boundary(strategy, control(tmp_path), row, {"attempt": 0}, 30)
    # The metrics reported with the checkpoint are the step's own, not the previous checkpoint's.
    assert strategy.calls == [("finish", False), ("finish", True), ("save", 20, ["loss", "step"])]
    assert decision.save and row["checkpoint_step"] == 10 and row["checkpoint_pause_s"] >= 0


@pytest.mark.parametrize("stopped", [False, True])
def test_the_loop_ends_with_its_checkpoint_written_and_reported(group, tmp_path, stopped):
    if stopped:
        stop_request.request(RunDir(str(tmp_path), "run"), "budget")
    strategy, row = FakeStrategy(), {"step": 10 if stopped else 30, "loss": 1.0}
    decision = _boundary(strategy, control(tmp_path), row, {"attempt": 0}, 30)
    assert strategy.calls[-2:] == [("save", row["step"], ["loss", "step"]), ("finish", True)]
    assert bool(decision.stop_reason) == stopped and "checkpoint_write_s" in row and "checkpoint_pause_s" in row


class RayTrainStandIn(LocalTrainFnUtils):
    """Ray Train's worker API in this process, installed through Ray's own seam (set_train_fn_utils, what Ray's
    local mode uses): a reported checkpoint is copied to `storage/<its name>` as Ray Train uploads it (its local
    copy removed when the report asks for that) and registered at once, as the controller does when every rank
    (here the one) has reported it; `get_checkpoint` hands back the latest, as to a restarted worker group."""

    def __init__(self, storage: Path):
        super().__init__(experiment_name="noticed")
        self.storage, self.reports, self.kept = storage, [], []

    def report(self, metrics, checkpoint=None, checkpoint_dir_name=None, **kwargs):
        self.reports.append((checkpoint_dir_name, metrics))
        if checkpoint is not None:
            shutil.copytree(checkpoint.path, self.storage / checkpoint_dir_name, dirs_exist_ok=True)
            if kwargs.get("delete_local_checkpoint_after_upload"):
                shutil.rmtree(checkpoint.path)
            self.kept.append(ray.train.Checkpoint.from_directory(self.storage / checkpoint_dir_name))

    def get_checkpoint(self):
        return self.kept[-1] if self.kept else None

    def get_all_reported_checkpoints(self, consistency_mode=None, timeout_s=None):
        return [ReportedCheckpoint(c, {}, ReportedCheckpointStatus.COMMITTED) for c in self.kept]


@pytest.fixture
def ray_train(tmp_path):
    stand_in = RayTrainStandIn(tmp_path / "ray-storage")
    set_train_fn_utils(stand_in)
    yield stand_in
    set_train_fn_utils(None)


class Restarted(Exception):
    """Ray Train ending the worker that waits after a notice's checkpoint (at the drain's deadline)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tiny")
    tiny_lm.build(root / "model", tiny_lm.corpus(400))
    (root / "corpus.txt").write_text(tiny_lm.corpus(400))
    return root


def attempt(loop_config: dict, ray_train: RayTrainStandIn, notice_at: int | None) -> list | None:
    """One attempt of the FSDP loop on one rank (a Ray Train worker group of one): Ray's answer is a notice from
    the `notice_at`-th time the loop asks on. Returns what Ray Train had been reported when the worker began to
    wait for the restart (which ends the attempt, as Ray Train ends the worker at the drain's deadline), or
    None when the loop ended without waiting."""
    asks, notice = itertools.count(1), SimpleNamespace(deadline_ms=None, preempted_ranks=[0])
    reported = []

    def wait(seconds: float) -> None:
        reported.extend(ray_train.reports)
        raise Restarted

    ask = lambda: notice if notice_at is not None and next(asks) >= notice_at else None  # noqa: E731
    worker = Worker(0, 1, torch.device("cpu"), ask, wait, lambda _, rank: Steps(rank))
    try:
        fsdp.run_loop(loop_config, worker)
    except Restarted:
        return reported
    return None


def test_the_loop_saves_at_a_notice_waits_and_its_restart_resumes_at_the_next_step(
    group, tiny, ray_train, tmp_path, monkeypatch, capsys
):
    """The FSDP loop itself (rayfleet/train/fsdp/__init__.py run_loop, its preemption branch), three attempts on
    one rank,
    the notice asked for every step, the cadence's checkpoint every 4 steps of 6: a notice at step 3, then one
    at step 4 of the restart (a cadence step). Each notice's checkpoint is written and reported before the
    worker waits for the restart (blocking), once (step 4: not also the cadence's), preemptions + 1 in its train
    state; each restart says it resumes at the next step, trains from there only (no step redone, none
    skipped), and its metrics rows carry the preemptions so far and steps_redone 0. (Ray's half, a drain's
    notice and the restart from the checkpoint, runs for real with the DDP job in
    tests/integration/test_preemption_on_local_cluster.py; this is the FSDP loop's own.)"""
    trained, train_step = [], fsdp._train_step
    monkeypatch.setattr(
        fsdp, "_train_step", lambda s, d, c, step, *rest: trained.append(step) or train_step(s, d, c, step, *rest)
    )
    overrides = [f"model={tiny / 'model'}", f"data={tiny / 'corpus.txt'}", f"storage={tmp_path / 'runs'}"]
    overrides += ["seq_len=32", "micro_batch_size=2", "grad_accum=1", "warmup_steps=1", "max_steps=6", "log_every=1"]
    overrides += [
        "num_workers=1",
        "checkpoint_every=4",
        "preemption_check_steps=1",
        "export=false",
        "tensorboard=false",
    ]
    config = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", overrides)
    loop_config = {"config": config, "run_name": "noticed", "model_dir": str(tiny / "model"), "tracking": Target(False)}
    waiting = " on a node that goes without a deadline: checkpoint saved at step {}; waiting for Ray Train to restart"

    assert attempt(loop_config, ray_train, notice_at=3) == [("checkpoint_step_0000003", {"step": 3, "preempted": True})]
    out = capsys.readouterr().out
    assert trained == [0, 1, 2] and waiting.format(3) in out
    # its first line and its record say what it trained on: the generated corpus, SYNTHETIC
    trained_on = f"SYNTHETIC generated verse, not tiny_shakespeare ({tiny / 'corpus.txt'})"
    assert f"noticed: starting with fsdp on {trained_on};" in out
    assert RunDir(str(tmp_path / "runs"), "noticed").record()["data"] == trained_on
    state = json.loads((tmp_path / "ray-storage" / "checkpoint_step_0000003" / "train_state.json").read_text())
    assert state == {"attempt": 0, "seed": 0, "strategy": "fsdp", "preemptions": 1, "steps_redone": 0, "step": 3}

    assert attempt(loop_config, ray_train, notice_at=1)[1:] == [
        ("checkpoint_step_0000004", {"step": 4, "preempted": True})
    ]
    out = capsys.readouterr().out
    assert f"noticed: resuming at step 4 (attempt 1) with fsdp on {trained_on};" in out and waiting.format(4) in out
    assert trained == [0, 1, 2, 3]

    assert attempt(loop_config, ray_train, notice_at=None) is None
    assert f"noticed: resuming at step 5 (attempt 2) with fsdp on {trained_on};" in capsys.readouterr().out
    assert trained == [0, 1, 2, 3, 4, 5]  # no step redone, none skipped
    assert [name for name, _ in ray_train.reports if name] == [f"checkpoint_step_000000{s}" for s in (3, 4, 6)]
    state = json.loads((tmp_path / "ray-storage" / "checkpoint_step_0000006" / "train_state.json").read_text())
    assert (state["step"], state["attempt"], state["preemptions"], state["steps_redone"]) == (6, 2, 2, 0)
    rows = read_rows(RunDir(str(tmp_path / "runs"), "noticed"))
    assert [(r["step"], r["attempt"], r["preemptions"], r["steps_redone"]) for r in rows] == [
        (1, 0, 0, 0), (2, 0, 0, 0), (3, 0, 0, 0), (4, 1, 1, 0), (5, 2, 2, 0), (6, 2, 2, 0)
    ]  # fmt: skip
    # Each row names the checkpoint its attempt resumed from, and so does the run record (the last resume's).
    assert [r["resumed_from"] for r in rows] == [None] * 3 + ["checkpoint_step_0000003"] + [
        "checkpoint_step_0000004"
    ] * 2
    record = RunDir(str(tmp_path / "runs"), "noticed").record()
    assert record["resumed_from"] == {"attempt": 2, "checkpoint": "checkpoint_step_0000004"}
    # Each attempt's phases for the goodput ledger (rayfleet/core/ledger.py), sent by its rank 0: no step redone.
    sent = ledger.sent_events(record)
    assert [sorted(k for k in record if k.startswith(ledger.EVENT + "/"))] == [["phases/0", "phases/1", "phases/2"]]
    assert all(all(e["seconds"][p] > 0 for p in ("model_load", "data", "compute")) for e in sent), sent
    assert sent[2]["seconds"]["checkpoint"] > 0 and not any("redone" in e["seconds"] for e in sent)


def test_the_drivers_first_line_says_synthetic_for_generated_text_and_not_for_real_text(tiny, tmp_path, capsys):
    """The driver resolves the recipes' data=<folder>/tiny_shakespeare.txt: the real file when it is there (no
    SYNTHETIC), else the generated corpus `make text-data` left beside it offline (SYNTHETIC, and why)."""
    folder = tmp_path / "text"
    generated = synthetic_text.write(folder)
    real_name = folder / "tiny_shakespeare.txt"
    config = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", [f"data={real_name}"])
    assert fsdp.with_data_resolved(config).data == str(generated)
    (line,) = capsys.readouterr().out.splitlines()
    assert line == (
        f"data: SYNTHETIC generated verse, not tiny_shakespeare ({generated}); {real_name} is not there "
        "(`make text-data` fetches tiny_shakespeare when online)"
    )
    real_name.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")  # the real format
    assert fsdp.with_data_resolved(config).data == str(real_name)
    assert capsys.readouterr().out.splitlines() == [f"data: {real_name}"]


class Killed(Exception):
    """The worker's process gone mid-step (its node lost): the attempt ends there, no checkpoint of its own."""


def test_a_resume_after_a_lost_worker_times_its_redone_steps_apart_from_compute(
    group, tiny, ray_train, tmp_path, monkeypatch
):
    """Attempt 0 logs steps 1-3 (its record reaches 3), checkpoints step 2 and is killed in step 4; the restart
    resumes from step 2's checkpoint, and step 3, taken again, is its ledger's `redone`, not compute
    (rayfleet/core/ledger.py). Watched failing with every step counted as compute."""
    kill_at, train_step = [3], fsdp._train_step

    def step_or_die(s, d, c, step, *rest):
        if kill_at and step == kill_at[0]:
            kill_at.clear()
            raise Killed
        return train_step(s, d, c, step, *rest)

    monkeypatch.setattr(fsdp, "_train_step", step_or_die)
    overrides = [f"model={tiny / 'model'}", f"data={tiny / 'corpus.txt'}", f"storage={tmp_path / 'runs'}"]
    overrides += ["seq_len=32", "micro_batch_size=2", "grad_accum=1", "warmup_steps=1", "max_steps=5", "log_every=1"]
    overrides += ["num_workers=1", "checkpoint_every=2", "export=false", "tensorboard=false", "async_checkpoint=false"]
    config = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", overrides)
    loop_config = {"config": config, "run_name": "lost", "model_dir": str(tiny / "model"), "tracking": Target(False)}
    with pytest.raises(Killed):
        attempt(loop_config, ray_train, notice_at=None)
    assert attempt(loop_config, ray_train, notice_at=None) is None
    rows = read_rows(RunDir(str(tmp_path / "runs"), "lost"))
    redone = rows[-1]["steps_redone"]
    assert redone == 1  # step 3: reached by attempt 0, past its checkpoint at step 2
    first, second = ledger.sent_events(RunDir(str(tmp_path / "runs"), "lost").record())
    assert "redone" not in first["seconds"] and second["seconds"]["redone"] > 0
    assert second["seconds"]["compute"] > 0  # steps 4 and 5, new work
