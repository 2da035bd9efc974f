"""The hang watchdog's judgement and bookkeeping (rayfleet/train/hang_watch.py), without Ray: which beats make a
hang, who did not arrive, heals counted across attempts, and how a node is marked. End to end, a rank blocked
in a gloo all-reduce on the local cluster: tests/integration/test_hang_on_local_cluster.py."""

from __future__ import annotations

import json

import pytest

from rayfleet.node import suspect
from rayfleet.train.hang_watch import Coordinator, Steps, describe, judge, mark_suspect


def beat(rank: int, entered: int, done: int, done_at: float, step_s: float | None = 0.1, worker: str = "a") -> dict:
    return {"rank": rank, "worker": f"{worker}{rank}", "node_id": f"node{rank}" * 8, "node_ip": f"10.0.0.{rank + 5}",
            "entered": entered, "done": done, "done_at": done_at, "step_s": step_s}  # fmt: skip


def test_a_rank_that_never_joins_the_next_step_is_named_once_the_window_passes():
    """Rank 1 finished step 5 and is stuck outside the step (an all-reduce rank 0 never joins); rank 0 entered
    step 6 and waits for it inside DDP's all-reduce. Window: max(20 x 0.1 s, 8 s) = 8 s."""
    beats = {0: beat(0, 6, 5, done_at=100.0), 1: beat(1, 5, 5, done_at=100.2)}
    assert judge(beats, now=108.0, factor=20, floor_s=8) is None  # 7.8 s: not yet
    hang = judge(beats, now=108.5, factor=20, floor_s=8)
    assert hang["laggards"] == [1] and hang["window_s"] == 8 and hang["silent_s"] == 8.3
    assert hang["ranks"][1] == {"node": "10.0.0.6", "node_id": "node1node1no", "worker": "a1", "entered": 5,
                                "finished": 5, "since_last_step_s": 8.3}  # fmt: skip
    assert describe(hang) == (
        "no step finished for 8 s (window 8 s); at step 6 of this attempt: rank 1 on 10.0.0.6 (finished 5)"
    )


def test_the_window_follows_the_median_step_time_above_the_floor():
    beats = {0: beat(0, 6, 5, 100.0, step_s=2.0), 1: beat(1, 6, 5, 100.0, step_s=3.0)}
    assert judge(beats, now=149.0, factor=20, floor_s=8) is None  # 20 x 2.5 s = 50 s
    hang = judge(beats, now=151.0, factor=20, floor_s=8)
    assert hang["window_s"] == 50 and hang["laggards"] == [0, 1]  # both inside the step: both named


@pytest.mark.parametrize(
    "beats",
    [
        {0: beat(0, 5, 5, 0.0), 1: beat(1, 5, 5, 0.0)},  # every rank between steps: evaluation, a checkpoint
        {0: beat(0, 1, 0, 0.0), 1: beat(1, 1, 0, 0.0)},  # the first step of an attempt: compile, data
        {},
    ],
)
def test_no_hang_between_steps_or_before_the_first_step(beats):
    assert judge(beats, now=10_000.0, factor=20, floor_s=8) is None


def test_heals_are_counted_across_attempts_and_the_last_hang_fails():
    clock = iter([0.0, 100.0, 100.0, 200.0, 200.0, 300.0]).__next__
    coordinator = Coordinator(factor=20, floor_s=8, max_heals=1, clock=lambda: clock())
    assert coordinator.verdict() is None
    for rank, (entered, done) in enumerate([(6, 5), (5, 5)]):
        coordinator.beat(beat(rank, entered, done, done_at=90.0))
    first = coordinator.verdict()
    assert first["action"] == "heal" and first["heals"] == 1 and first["laggards"] == [1]
    assert coordinator.verdict() is first  # fixed for this attempt: judged once
    for rank, (entered, done) in enumerate([(6, 5), (5, 5)]):  # the restarted group's new processes
        coordinator.beat(beat(rank, entered, done, done_at=190.0, worker="b"))
    second = coordinator.verdict()
    assert second["action"] == "fail" and second["heals"] == 1


def test_a_node_with_the_ecs_entry_point_is_marked_through_its_current_run_directory(tmp_path):
    done = mark_suspect("at step 6: rank 1 (finished 5)", {"RAYFLEET_CURRENT_RUN_DIR": str(tmp_path)})
    assert done.startswith("marked node ") and done.endswith("its entry point drains it")
    found = suspect.read(tmp_path)  # what the worker's entry point reads
    assert found["reasons"] == ["hang: at step 6: rank 1 (finished 5)"]
    assert suspect.reason(found, "i-0abc") == "node suspect on i-0abc: hang: at step 6: rank 1 (finished 5)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suspect.json"]
    json.loads((tmp_path / "suspect.json").read_text())


def test_steps_count_and_time_without_a_coordinator():
    times = iter([0.0, 1.0, 1.5, 2.5]).__next__
    steps = Steps(rank=3, clock=times)
    for _ in range(3):
        steps.enter()
        steps.leave()
    assert (steps.entered, steps.done, steps.done_at) == (3, 3, 2.5) and list(steps.times) == [0.5, 1.0]


def test_a_node_without_the_entry_point_is_drained_through_rays_gcs(monkeypatch, tmp_path):
    """No current-run directory (a local cluster's node): the rank asks Ray to drain its own node, with the
    evidence as the reason and a short deadline, through the one drain request (rayfleet/core/ray_drain.py)."""
    from types import SimpleNamespace

    import ray

    from rayfleet.core import ray_drain
    from rayfleet.train import hang_watch

    asked = []
    context = SimpleNamespace(gcs_address="127.0.0.1:6490", get_node_id=lambda: "ab" * 28)
    monkeypatch.setattr(ray, "get_runtime_context", lambda: context)
    monkeypatch.setattr(ray_drain, "request", lambda *args: asked.append(args))
    done = mark_suspect("at step 6 of this attempt: rank 1", {"RAYFLEET_CURRENT_RUN_DIR": str(tmp_path / "none")})
    deadline = hang_watch.DRAIN_DEADLINE_S
    assert asked == [("127.0.0.1:6490", "ab" * 28, "node suspect: hang: at step 6 of this attempt: rank 1", deadline)]
    assert done == f"drained node {'ab' * 6}: the group restarts elsewhere in {deadline} s"
    monkeypatch.setattr(ray_drain, "request", lambda *args: "Node not found")
    assert mark_suspect("x", {}) == "Node not found"  # Ray's one-line refusal, said as it is
