"""The FSDP job's LR schedule, its logged-step metrics read from device tensors once, and the order of its
checkpoint calls at a logged step (in a plain one-process gloo group: no Ray)."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.distributed as dist

from rayfleet.core.config import load_config
from rayfleet.core.run_dir import RunDir
from rayfleet.train import stop
from rayfleet.train.fsdp import _boundary, _train_step, lr_at
from rayfleet.train.fsdp_config import FSDPConfig
from rayfleet.train.fsdp_metrics import step_metrics, window
from rayfleet.train.preemption import Preemption
from rayfleet.train.run_control import RunControl


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
        stop.request(RunDir(str(tmp_path), "run"), "budget")
    strategy, row = FakeStrategy(), {"step": 10 if stopped else 30, "loss": 1.0}
    decision = _boundary(strategy, control(tmp_path), row, {"attempt": 0}, 30)
    assert strategy.calls[-2:] == [("save", row["step"], ["loss", "step"]), ("finish", True)]
    assert bool(decision.stop_reason) == stopped and "checkpoint_write_s" in row and "checkpoint_pause_s" in row
