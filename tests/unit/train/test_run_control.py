"""RunControl, the decisions around a training loop's steps that the DDP and FSDP jobs share: the checkpoint
cadence, the one checkpoint a preemption notice or a budget's stop request asks for. Its methods called in the
order its docstring gives, on a real run directory and a one-process gloo group (run_control.agreed is an all-reduce),
with a fake Ray answer and a fake clock. The FSDP loop's own use of it, through a notice and the restart, is
tests/unit/train/test_fsdp.py's (the real loop, not a copy)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from rayfleet.train.control import run_control
from rayfleet.train.control.preemption import REACHED_FILE, NoRestart, Preemption
from rayfleet.train.control.run_control import Decision, RunControl
from tests.unit.train.test_preemption import Clock

CPU = torch.device("cpu")
NOTICE = "preemption notice: rank(s) [1] on a node that goes without a deadline"
BUDGET = "stopped by budget: max_hours 1"


@pytest.fixture(autouse=True)
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture
def run_dir(tmp_path) -> RunDir:
    return RunDir(str(tmp_path), "run")


def preemption(notice_at: int | None = None, every: int = 1) -> Preemption:
    """Ray answers with a notice from step `notice_at` on (asked every `every` steps); the wait for the restart
    runs on a fake clock, so it ends at once in NoRestart."""
    steps = iter(range(every, 10_000, every))  # the steps at which Preemption asks
    info = SimpleNamespace(deadline_ms=None, preempted_ranks=[1])
    clock = Clock()
    ask = lambda: info if notice_at is not None and next(steps) >= notice_at else None  # noqa: E731
    return Preemption(every, ask=ask, clock=clock, sleep=clock.sleep)


def test_checkpoints_every_n_and_at_the_last_step(run_dir, capsys):
    control = RunControl(run_dir, 0, CPU, preemption(), checkpoint_every=3, last=10)
    assert [done for done in range(1, 13) if control.checkpoint_due(done)] == [3, 6, 9, 10, 12]
    saved: list[int] = []
    assert control.at_boundary(3, lambda: saved.append(3), "at step 3") == Decision(save=True)
    assert control.at_boundary(4, lambda: pytest.fail("saved"), "at step 4") == Decision(save=False)
    assert control.at_boundary(10, lambda: saved.append(10), "at step 10") == Decision(save=True)
    assert saved == [3, 10] and capsys.readouterr().out == "" and run_dir.read(REACHED_FILE) is None


def test_every_boundary_is_due_by_default_as_each_ddp_epoch(run_dir):
    control = RunControl(run_dir, 0, CPU, preemption(), last=3, stop_after_save=True)
    assert [control.checkpoint_due(epoch) for epoch in (1, 2, 3)] == [True, True, True]


def test_a_notice_saves_one_checkpoint_records_the_step_and_waits_for_the_restart(run_dir, capsys):
    control = RunControl(run_dir, 0, CPU, preemption(notice_at=4, every=2), checkpoint_every=5, last=20)
    assert [control.noticed(done) for done in range(1, 5)] == [False, False, False, True]  # asked at 2 and 4
    saved: list[int] = []
    with pytest.raises(NoRestart):  # the wait for the restart, on the fake clock
        control.save_at_notice(lambda: saved.append(4), "step 4", 4)
    assert saved == [4]
    assert json.loads(run_dir.read(REACHED_FILE)) == {"position": 4}
    assert capsys.readouterr().out.splitlines() == [
        f"{NOTICE}: checkpoint saved at step 4; waiting for Ray Train to restart the run from it"
    ]
    control.save_at_notice(lambda: pytest.fail("saved twice"), "step 4", 4)  # the notice is spent
    assert not control.noticed(6)  # and Ray is not asked again


def test_a_pending_notice_takes_the_place_of_the_cadences_checkpoint(run_dir):
    control = RunControl(run_dir, 0, CPU, preemption(notice_at=4, every=2), checkpoint_every=2, last=20)
    saved: list[str] = []
    assert not control.noticed(2)
    assert control.at_boundary(2, lambda: saved.append("regular 2"), "at step 2") == Decision(save=True)
    assert control.noticed(4)
    assert control.at_boundary(4, lambda: pytest.fail("saved"), "at step 4") == Decision(save=False)
    with pytest.raises(NoRestart):
        control.save_at_notice(lambda: saved.append("notice 4"), "step 4", 4)
    assert saved == ["regular 2", "notice 4"]


def test_a_stop_request_saves_the_step_due_or_not_and_ends_the_run(run_dir, capsys):
    control = RunControl(run_dir, 0, CPU, preemption(), checkpoint_every=10, last=20)
    assert control.at_boundary(2, lambda: pytest.fail("saved"), "at step 2") == Decision(save=False)
    stop_request.request(run_dir, BUDGET)
    saved: list[int] = []
    assert control.at_boundary(3, lambda: saved.append(3), "at step 3") == Decision(save=True, stop_reason=BUDGET)
    assert saved == [3]
    assert capsys.readouterr().out.splitlines() == [f"stopping at step 3 (its checkpoint is saved): {BUDGET}"]


def test_a_stop_and_a_notice_at_one_step_save_once_and_stop(run_dir, capsys):
    control = RunControl(run_dir, 0, CPU, preemption(notice_at=1), checkpoint_every=10, last=20)
    stop_request.request(run_dir, BUDGET)
    saved: list[str] = []
    assert control.noticed(3)
    decision = control.at_boundary(3, lambda: saved.append("regular 3"), "at step 3")
    assert decision == Decision(save=True, stop_reason=BUDGET)
    control.save_at_notice(lambda: pytest.fail("saved twice"), "step 3", 3)  # no notice checkpoint, no wait
    assert saved == ["regular 3"]
    assert capsys.readouterr().out.splitlines() == [f"stopping at step 3 (its checkpoint is saved): {BUDGET}"]


@pytest.mark.parametrize(("stop_after_save", "stopped_at"), [(True, 1), (False, 2)])
def test_the_stop_request_is_asked_for_before_or_after_the_checkpoint(
    run_dir, monkeypatch, stop_after_save, stopped_at
):
    """DDP asks after each epoch's checkpoint: a request that comes while it is written stops the run there.
    Either way the collective runs once per boundary, on every rank alike."""
    asked = []
    agreed = run_control.agreed
    monkeypatch.setattr(run_control, "agreed", lambda *args: asked.append(args) or agreed(*args))
    control = RunControl(run_dir, 0, CPU, preemption(), last=5, stop_after_save=stop_after_save)
    saved: list[int] = []

    def save(epoch: int) -> None:
        saved.append(epoch)
        stop_request.request(run_dir, BUDGET)  # arrives while the checkpoint is written

    decisions = [control.at_boundary(epoch, lambda e=epoch: save(e), f"after epoch {epoch}") for epoch in (1, 2)]
    assert decisions[stopped_at - 1] == Decision(save=True, stop_reason=BUDGET)
    assert saved == [1, 2] and len(asked) == 2
    if not stop_after_save:
        assert decisions[0] == Decision(save=True)


def test_a_stop_asked_after_the_checkpoint_still_saves_a_boundary_that_was_not_due(run_dir, capsys):
    control = RunControl(run_dir, 0, CPU, preemption(), checkpoint_every=5, last=20, stop_after_save=True)
    stop_request.request(run_dir, BUDGET)
    saved: list[int] = []
    assert control.at_boundary(2, lambda: saved.append(2), "after epoch 2") == Decision(save=True, stop_reason=BUDGET)
    assert saved == [2]
    assert capsys.readouterr().out == f"stopping after epoch 2 (its checkpoint is saved): {BUDGET}\n"


def test_other_ranks_save_at_a_notice_but_neither_record_nor_print(run_dir, capsys):
    control = RunControl(run_dir, 1, CPU, preemption(notice_at=1), checkpoint_every=5, last=5)
    saved: list[int] = []
    assert control.noticed(1)
    with pytest.raises(NoRestart):
        control.save_at_notice(lambda: saved.append(1), "step 1", 1)
    assert saved == [1]
    assert run_dir.read(REACHED_FILE) is None and capsys.readouterr().out == ""
