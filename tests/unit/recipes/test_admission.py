"""A queued run's wait (rayfleet/recipes/admission.py), with Ray's placement replaced by a function: what it says,
when it is admitted, a cancel while it waits, and the entry it keeps while it runs."""

from __future__ import annotations

import json

import pytest

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import ADMITTED, RUNNING, WAITING, Budget, Entry, Queue
from rayfleet.recipes import admission, placement
from rayfleet.recipes.schema import load
from tests.unit.recipes.helpers import GOOD, write


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def entry(run: str, at: float = 0.0) -> Entry:
    return Entry(run=run, priority=0, submitted_at=1_000_000.0 + at, workers=2, cpus_per_worker=1.0)


def test_the_first_run_waits_until_its_whole_group_fits_saying_why_once(tmp_path, capsys):
    queue, clock, tries = Queue(str(tmp_path)), Clock(), []
    me = entry("me")

    def try_place(e: Entry) -> bool:
        tries.append(clock())
        return len(tries) >= 3  # the workers free up at the third try

    run_dir = RunDir(str(tmp_path / "runs"), "me")
    assert admission.wait_turn(queue, me, run_dir, try_place, clock, clock.sleep) is None
    out = capsys.readouterr().out
    assert out.count("queued: first of 1 in the queue; waiting for 2 x 1 CPU to be free at once") == 1
    stored = queue.get("me")
    assert stored.state == ADMITTED and stored.admitted_at == clock() and len(tries) == 3


def test_a_run_behind_another_never_asks_ray_and_is_cancelled_while_it_waits(tmp_path, capsys):
    queue, clock = Queue(str(tmp_path)), Clock()
    ahead = entry("ahead")
    ahead.heartbeat_at = clock()
    queue.put(ahead)
    run_dir = RunDir(str(tmp_path / "runs"), "me")

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        ahead.heartbeat_at = clock()
        queue.put(ahead)  # the run ahead is alive and keeps its place
        if clock() > 1_000_003:
            stop_request.request(run_dir, stop_request.CANCELLED)

    never = []
    reason = admission.wait_turn(queue, entry("me", at=1), run_dir, never.append, clock, sleep)
    assert reason == stop_request.CANCELLED and never == []
    assert "queued: position 2 of 2: behind ahead (priority 0)" in capsys.readouterr().out
    assert queue.get("me").state == WAITING  # admit() removes it; wait_turn leaves that to its caller


def test_a_run_ahead_whose_job_is_gone_is_passed(tmp_path):
    queue, clock = Queue(str(tmp_path)), Clock()
    dead = entry("dead")
    dead.heartbeat_at = clock() - 60
    queue.put(dead)
    run_dir = RunDir(str(tmp_path / "runs"), "me")
    assert admission.wait_turn(queue, entry("me", at=1), run_dir, lambda e: True, clock, clock.sleep) is None


def test_while_it_runs_the_entry_is_refreshed_marked_placed_and_removed_at_the_end(tmp_path, monkeypatch):
    monkeypatch.setattr(admission, "HEARTBEAT_S", 0.01)
    queue = Queue(str(tmp_path))
    me = entry("me")
    import time

    me.state, me.admitted_at = ADMITTED, time.time()
    asked, seen = [], []

    def is_placed() -> bool:
        asked.append(1)
        return len(asked) >= 2

    with admission.holding(queue, me, is_placed):
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (queue.get("me") is None or queue.get("me").state != RUNNING):
            time.sleep(0.01)
        seen.append(queue.get("me"))
    assert seen[0].state == RUNNING and seen[0].placed and len(asked) == 2  # not asked again once placed
    assert queue.get("me") is None


def test_the_entry_comes_from_the_recipe_and_travels_on_the_jobs_command_line(tmp_path):
    loaded = load(write(tmp_path, {**GOOD, "priority": 4, "resources": {"workers": 3, "gpus_per_worker": 1}}))
    made = admission.entry_for(loaded.recipe, "job-1", clock=lambda: 42.0)
    assert (made.run, made.priority, made.submitted_at, made.workers, made.gpus_per_worker) == ("job-1", 4, 42.0, 3, 1)
    assert not made.one_per_node and made.resources() == "3 x 1 CPU + 1 GPU"
    value = admission.spec("s3://bucket", made)
    queue, back = admission.parse(value, {"RAY_JOB_SUBMISSION_ID": "rayfleet-job-1-x"})
    assert queue.url == "s3://bucket/queue" and back.submission_id == "rayfleet-job-1-x"
    assert json.loads(value)["entry"]["run"] == "job-1"
    elastic = load(write(tmp_path, {**GOOD, "resources": {"workers": "2-4"}})).recipe
    assert admission.entry_for(elastic, "job-2").workers == 2  # admitted once its minimum can be placed


def test_placed_means_a_group_asked_for_since_the_admission():
    now = {"old": ("CREATED", 999.0), "probe": ("REMOVED", 999.5)}
    is_placed = placement.placed_since(1000.0, listed=lambda: dict(now))
    assert not is_placed()  # what was asked for before the admission is someone else's
    now["new"] = ("PENDING", 1003.0)
    assert not is_placed()  # asked for, not yet placed
    now["new"] = ("CREATED", 1003.0)
    assert is_placed()


def test_a_run_alone_in_the_queue_is_admitted_without_a_ray_driver(tmp_path, monkeypatch, capsys):
    """No other entry: admitted at once, Ray asked nothing (no driver, no probe); its entry says ADMITTED."""
    queue, run_dir = Queue(str(tmp_path)), RunDir(str(tmp_path / "runs"), "me")

    def no_driver():
        raise AssertionError("a Ray driver was started")

    monkeypatch.setattr(admission, "bare_driver", no_driver)
    is_placed = admission.admit(queue, entry("me"), run_dir)
    assert callable(is_placed)
    stored = queue.get("me")
    assert stored.state == ADMITTED and stored.admitted_at is not None
    assert "admitted at once: no other run in the queue; Ray places all 2 x 1 CPU together" in capsys.readouterr().out
    assert run_dir.record()["state"] == "RUNNING"


@pytest.mark.parametrize("other", ["another run", "a stop", "the budget"])
def test_a_run_not_alone_waits_its_turn(tmp_path, other):
    """Another entry (of any state: the probe and the order decide), a stop asked for, or a budget with no room:
    `wait_turn` decides, as for every run."""
    queue, clock = Queue(str(tmp_path)), Clock()
    run_dir = RunDir(str(tmp_path / "runs"), "me")
    me = entry("me")
    if other == "another run":
        ahead = entry("ahead", at=5)  # behind it by submission time: still not alone
        ahead.heartbeat_at = clock()
        queue.put(ahead)
    elif other == "a stop":
        stop_request.request(run_dir, stop_request.CANCELLED)
    else:
        queue = Queue(str(tmp_path), Budget(1.0, "total"))
        me.usd_per_hour, me.max_usd = 2.0, 2.0  # its projected cost alone is over the budget
    queue.put(me)
    assert not admission.alone(queue, me, run_dir, clock)
    assert queue.get("me").state == WAITING
    me.state = WAITING
    assert admission.alone(Queue(str(tmp_path / "empty")), me, RunDir(str(tmp_path / "r2"), "me"), clock)


def on(run: str, at: float, group: str) -> Entry:
    made = entry(run, at)
    made.group = group
    return made


def test_a_full_group_holds_back_no_run_on_another_group(tmp_path, capsys):
    """Every worker group has a line of its own: a run on b goes at once while a's run waits, and a later run
    on a waits behind a's, not for b's placement; a run on no group lines up with all of them."""
    queue, clock = Queue(str(tmp_path)), Clock()
    first_on_a = on("first-on-a", 0, "a")
    first_on_a.heartbeat_at = clock()
    queue.put(first_on_a)
    on_b = on("on-b", 5, "b")
    assert admission.alone(queue, on_b, RunDir(str(tmp_path / "runs"), "on-b"), clock)  # ADMITTED, placing
    assert not admission.alone(queue, entry("anywhere", at=6), RunDir(str(tmp_path / "runs"), "anywhere"), clock)
    run_dir = RunDir(str(tmp_path / "runs"), "a-too")

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        for alive in (first_on_a, on_b):
            alive.heartbeat_at = clock()
            queue.put(alive)
        stop_request.request(run_dir, stop_request.CANCELLED)

    tried = []
    assert (
        admission.wait_turn(queue, on("a-too", 7, "a"), run_dir, tried.append, clock, sleep) == stop_request.CANCELLED
    )
    out = capsys.readouterr().out
    assert "queued: position 2 of 2: behind first-on-a (priority 0)" in out and "on-b" not in out and not tried
