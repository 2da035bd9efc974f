"""A queued run's move to another worker group (rayfleet/recipes/group_move.py) inside its wait
(rayfleet/recipes/admission.py), with Ray's placement replaced by a function and a fake clock: when it moves,
what it says and records, that the probe follows it, and that the spec travels and is checked."""

from __future__ import annotations

import json

import pytest

from rayfleet.core import stop_request
from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import ADMITTED, Budget, Entry, Queue
from rayfleet.recipes import admission
from rayfleet.recipes.group_move import GroupMove
from tests.unit.recipes.test_admission import Clock


def on(run: str, at: float, group: str) -> Entry:
    return Entry(run=run, priority=0, submitted_at=1_000_000.0 + at, workers=1, cpus_per_worker=1.0, group=group)


def held_b(queue: Queue, clock: Clock, run_dir: RunDir):
    """A run ahead on group b that stays alive (its heartbeat) for the whole wait."""
    ahead = on("ahead", 0, "b")
    ahead.heartbeat_at = clock()
    queue.put(ahead)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        ahead.heartbeat_at = clock()
        queue.put(ahead)

    return sleep


def test_a_run_waiting_in_its_groups_line_moves_to_the_next_group_after_its_minutes(tmp_path, capsys):
    queue, clock = Queue(str(tmp_path / "q")), Clock()
    run_dir = RunDir(str(tmp_path / "runs"), "me")
    sleep = held_b(queue, clock, run_dir)
    tried = []
    me, move = on("me", 1, "b"), GroupMove(["a", "c"], after_s=120)

    def try_place(e: Entry) -> bool:
        tried.append((clock(), e.group))
        return e.group == "a"

    assert admission.wait_turn(queue, me, run_dir, try_place, clock, sleep, move=move) is None
    # behind `ahead` on b it never asked Ray; moved after 120 s, it asked for a's nodes and was admitted there
    assert tried == [(1_000_120.0, "a")] and me.group == "a" and queue.get("me").state == ADMITTED
    assert queue.get("me").group == "a"  # the queue's per-group lines see it on a from now on
    out = capsys.readouterr().out
    line = "[rayfleet] capacity: worker group b: position 2 of 2: behind ahead (priority 0) for 2 min: the run moves"
    assert f"{line} to group a" in out
    record = run_dir.record()
    assert record["group"] == "a"
    (step,) = record["capacity_steps"]
    assert step == {
        "step": "group",
        "group": "b",
        "to": "a",
        "waited_min": 2.0,
        "reason": "position 2 of 2: behind ahead (priority 0)",
        "by": "the run's job on the local cluster, while it waited in the queue",
    }


def test_it_tries_each_other_group_once_then_waits_where_it_is(tmp_path, capsys):
    queue, clock = Queue(str(tmp_path / "q")), Clock()
    run_dir = RunDir(str(tmp_path / "runs"), "me")
    me, move = on("me", 1, "b"), GroupMove(["a", "c"], after_s=0)
    seen = []

    def try_place(e: Entry) -> bool:
        seen.append(e.group)
        return len(seen) > 6  # no group has room for a while

    assert admission.wait_turn(queue, me, run_dir, try_place, clock, clock.sleep, move=move) is None
    assert seen[:3] == ["b", "a", "c"] and set(seen[3:]) == {"c"}  # never back to b or a: one step per group
    assert [s["to"] for s in run_dir.record()["capacity_steps"]] == ["a", "c"]
    assert "moves to group c" in capsys.readouterr().out


def test_a_run_held_by_the_queues_budget_does_not_move(tmp_path, capsys):
    """Held, a run is short of budget, not of nodes: another group would not help."""
    queue, clock = Queue(str(tmp_path / "q"), Budget(1.0)), Clock()
    run_dir = RunDir(str(tmp_path / "runs"), "me")
    me = on("me", 1, "b")
    me.usd_per_hour, me.max_usd = 2.0, 5.0  # its projected $5 never fits the $1 budget
    move = GroupMove(["a"], after_s=0)

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        if clock() > 1_000_010:
            stop_request.request(run_dir, stop_request.CANCELLED)

    assert admission.wait_turn(queue, me, run_dir, lambda e: True, clock, sleep, move=move) == stop_request.CANCELLED
    assert "queued: held" in capsys.readouterr().out
    assert me.group == "b" and move.steps == [] and "capacity_steps" not in run_dir.record()


def test_the_move_travels_in_the_queue_spec_and_a_bad_one_is_refused():
    entry = on("me", 1, "b")
    text = admission.spec("/q", entry, None, GroupMove(["a"], after_s=300))
    assert admission.move_of(text) == GroupMove(["a"], 300.0)
    assert admission.parse(text, {})[1].group == "b"
    assert admission.move_of(admission.spec("/q", entry)) is None
    for bad in ({"groups": ["A B"], "after_s": 1}, {"groups": ["a"], "after_s": -1}, {"groups": ["a"]}):
        with pytest.raises(ConfigError, match="the queue's group move"):
            admission.move_of(json.dumps({**json.loads(text), "move": bad}))


def test_a_wait_that_was_paused_starts_anew(tmp_path):
    """Held by the budget for a while (wait_turn pauses the move), a run waits its full minutes for nodes again
    before it moves, not at once."""
    run_dir, said = RunDir(str(tmp_path / "runs"), "me"), []
    move, me = GroupMove(["a"], after_s=120), on("me", 1, "b")
    assert not move.step(me, "waiting", 1000.0, run_dir, said.append)
    move.pause()  # held from here to 1300
    assert not move.step(me, "waiting", 1300.0, run_dir, said.append) and me.group == "b"
    assert move.step(me, "waiting", 1420.0, run_dir, said.append) and me.group == "a"
    assert said == ["capacity: worker group b: waiting for 2 min: the run moves to group a"]


def test_the_groups_a_job_can_pass_are_a_bounded_list_of_names():
    for bad in ("abc", ["a"] * 65, [1]):
        with pytest.raises(ConfigError, match="the queue's group move"):
            GroupMove.from_spec({"groups": bad, "after_s": 1})
