"""The preemption check a job (or a user's loop) runs, with a fake Ray answer and a fake clock; the epoch
order a mid-epoch resume relies on; the record that counts redone work."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rayfleet.core.run_dir import RunDir
from rayfleet.train.control.preemption import (
    RESTART_GRACE_S,
    NoRestart,
    Preemption,
    record_reached,
    redone_since,
    steps_between_checks,
)
from rayfleet.train.data.order import epoch_shard


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_asks_ray_every_n_steps_and_reports_the_notice_once():
    answers = iter([None, None, SimpleNamespace(deadline_ms=None, preempted_ranks=[1])])
    asked = []
    check = Preemption(5, ask=lambda: asked.append(1) or next(answers))
    seen = [step for step in range(1, 31) if check.noticed(step)]
    assert seen == [15] and len(asked) == 3  # steps 5, 10, 15; never again after the notice
    assert check.describe() == "preemption notice: rank(s) [1] on a node that goes without a deadline"


def test_zero_steps_never_asks():
    check = Preemption(0, ask=lambda: pytest.fail("asked"))
    assert not any(check.noticed(step) for step in range(1, 50))


def test_waits_for_the_restart_until_long_after_the_deadline():
    clock = Clock()
    info = SimpleNamespace(deadline_ms=(clock.now + 40) * 1000, preempted_ranks=[0, 1])
    check = Preemption(1, ask=lambda: info, clock=clock, sleep=clock.sleep)
    assert check.noticed(1)
    assert check.describe() == "preemption notice: rank(s) [0, 1] on a node that goes in 40 s"
    started = clock.now
    with pytest.raises(NoRestart, match="no restart came 300 s after it"):
        check.wait_for_restart()
    assert clock.now - started == pytest.approx(40 + RESTART_GRACE_S, abs=1.0)


def test_redone_work_is_where_the_run_got_past_the_checkpoint(tmp_path):
    run_dir = RunDir(str(tmp_path), "r")
    assert redone_since(run_dir, 100) == 0  # nothing recorded: nothing known to be redone
    record_reached(run_dir, 130)
    assert redone_since(run_dir, 100) == 30
    assert redone_since(run_dir, 130) == 0  # a caught preemption: checkpoint where the run stopped


@pytest.mark.parametrize(("world", "then"), [(2, 2), (2, 3), (4, 1)])
def test_a_mid_epoch_resume_sees_each_remaining_sample_once(world, then):
    n, batch, steps = 103, 4, 5
    shards = [epoch_shard(n, 3, rank, world, seed=7) for rank in range(world)]
    consumed = torch.cat([shard[: steps * batch] for shard in shards])
    order = torch.randperm(n, generator=torch.Generator().manual_seed(7 * 1_000_003 + 3))
    assert sorted(consumed.tolist()) == sorted(order[: steps * batch * world].tolist())  # a prefix
    skip = steps * batch * world
    rest = torch.cat([epoch_shard(n, 3, rank, then, seed=7, skip=skip) for rank in range(then)])
    assert not set(rest.tolist()) & set(consumed.tolist())
    assert len(set(rest.tolist())) == len(rest) >= n - skip - then + 1  # at most the tail of < `then` waits


def test_fast_steps_ask_about_once_a_second_at_a_multiple_of_the_configured_cadence():
    assert steps_between_checks(10, steps=468, seconds=1.5) == 310  # GPU: 3.2 ms steps, 312 a second
    assert steps_between_checks(10, steps=100, seconds=40.0) == 10  # CPU: 0.4 s steps, never below N
    assert steps_between_checks(4, steps=50, seconds=5.0) == 8  # 10 steps a second: the multiple of 4 below
    assert steps_between_checks(0, steps=468, seconds=1.5) == 0  # never stays never
    assert steps_between_checks(10, steps=0, seconds=0.0) == 10  # nothing measured: as configured
