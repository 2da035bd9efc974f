"""The hang watchdog's judgement and bookkeeping (rayfleet/train/control/hang_watch.py), without Ray: which beats make a
hang, who did not arrive, heals counted across attempts, and how a node is marked. End to end, a rank blocked
in a gloo all-reduce on the local cluster: tests/integration/test_hang_on_local_cluster.py."""

from __future__ import annotations

import json

import pytest

from rayfleet.node.control import suspect
from rayfleet.train.control import hang_beats
from rayfleet.train.control.hang_watch import Coordinator, Steps, describe, judge, mark_suspect


def beat(rank: int, entered: int, done: int, done_at: float, step_s: float | None = 0.1, worker: str = "a") -> dict:
    """Rank `rank`'s beat from process `worker` (a, b: the first and the restarted group's)."""
    node_id, pid = f"node{rank}" * 8, 1000 * (ord(worker) - ord("a") + 1) + rank
    return {"rank": rank, "worker": f"{node_id}:{pid}", "node_id": node_id, "node_ip": f"10.0.0.{rank + 5}",
            "actor_id": f"{pid:032x}", "entered": entered, "done": done, "done_at": done_at,
            "step_s": step_s}  # fmt: skip


def anyone(beat: dict) -> bool:  # the sender check, for tests of the judgement alone
    return True


def test_a_rank_that_never_joins_the_next_step_is_named_once_the_window_passes():
    """Rank 1 finished step 5 and is stuck outside the step (an all-reduce rank 0 never joins); rank 0 entered
    step 6 and waits for it inside DDP's all-reduce. Window: max(20 x 0.1 s, 8 s) = 8 s."""
    beats = {0: beat(0, 6, 5, done_at=100.0), 1: beat(1, 5, 5, done_at=100.2)}
    assert judge(beats, now=108.0, factor=20, floor_s=8) is None  # 7.8 s: not yet
    hang = judge(beats, now=108.5, factor=20, floor_s=8)
    assert hang["laggards"] == [1] and hang["window_s"] == 8 and hang["silent_s"] == 8.3
    assert hang["ranks"][1] == {"node": "10.0.0.6", "node_id": "node1node1no", "worker": f"{'node1' * 8}:1001",
                                "entered": 5, "finished": 5, "since_last_step_s": 8.3}  # fmt: skip
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


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_heals_are_counted_across_attempts_and_the_last_hang_fails():
    clock = Clock(0.0)
    coordinator = Coordinator(factor=20, floor_s=8, max_heals=1, clock=clock, senders=anyone)
    assert coordinator.verdict() is None
    clock.now = 90.0
    for rank, (entered, done) in enumerate([(6, 5), (5, 5)]):
        coordinator.beat(beat(rank, entered, done, done_at=90.0))
    clock.now = 100.0
    first = coordinator.verdict()
    assert first["action"] == "heal" and first["heals"] == 1 and first["laggards"] == [1]
    assert coordinator.verdict() is first  # fixed for this attempt: judged once
    clock.now = 190.0
    for rank, (entered, done) in enumerate([(6, 5), (5, 5)]):  # the restarted group's new processes
        coordinator.beat(beat(rank, entered, done, done_at=190.0, worker="b"))
    clock.now = 200.0
    second = coordinator.verdict()
    assert second["action"] == "fail" and second["heals"] == 1


def actor_table(*beats: dict, job: str = "05000000") -> dict:
    """Ray's actor table as the GCS gives it (ray._private.state.actors) for the beats' senders."""
    return {
        b["actor_id"]: {"JobID": job, "State": "ALIVE", "Address": {"NodeID": b["node_id"]},
                        "Pid": int(b["worker"].rpartition(":")[2])}
        for b in beats
    }  # fmt: skip


def test_a_forged_beat_from_another_job_makes_no_hang():
    """Issue 54 R3: another job finds the coordinator by its name and sends a rank far ahead; on the old code
    the run's real ranks became laggards: their nodes drained and their instances replaced."""
    clock = Clock(100.0)
    real = [beat(0, 6, 6, done_at=95.0), beat(1, 6, 6, done_at=95.0)]
    forged = {**beat(2, 50, 49, done_at=95.0, worker="x"), "rank": 2}
    table = {**actor_table(*real), **actor_table(forged, job="09000000")}  # its own actor, of its own job
    said: list[str] = []
    senders = hang_beats.RunWorkers(job_id="05000000", lookup=table.get, say=said.append)
    coordinator = Coordinator(factor=20, floor_s=8, max_heals=1, clock=clock, senders=senders)
    for each in [*real, forged, {**forged, "actor_id": real[0]["actor_id"]}]:  # the last claims rank 0's actor
        coordinator.beat(each)
    clock.now = 1000.0
    assert coordinator.verdict() is None and sorted(coordinator.beats) == [0, 1]
    assert coordinator.refused == {"not a worker of this run": 2}


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"rank": -1}, "no rank"),
        ({"rank": True}, "no rank"),
        ({"rank": 10**9}, "no rank"),
        ({"done": 7}, "counters out of bounds"),  # finished a step it never entered
        ({"entered": 1.5}, "counters out of bounds"),
        ({"done_at": float("nan")}, "a time in the future"),
        ({"done_at": 10_000.0}, "a time in the future"),
        ({"step_s": float("inf")}, "a step time out of bounds"),
        ({"node_id": "x" * 1000}, "no node_id"),
        ({"actor_id": "zz"}, "no actor id"),
        ({"worker": "othernode:12"}, "a worker that is not its node and process"),
    ],
)
def test_a_malformed_beat_is_refused(change, why):
    assert hang_beats.well_formed(beat(0, 6, 5, done_at=90.0), now=100.0) is None
    assert hang_beats.well_formed({**beat(0, 6, 5, done_at=90.0), **change}, now=100.0) == why
    coordinator = Coordinator(factor=20, floor_s=8, max_heals=1, clock=Clock(100.0), senders=anyone)
    coordinator.beat({**beat(0, 6, 5, done_at=90.0), **change})
    assert coordinator.beats == {} and coordinator.refused == {why: 1}


def test_the_sender_check_wants_the_alive_actor_of_this_job_on_the_claimed_node_and_process():
    sent = beat(0, 6, 5, done_at=90.0)
    row = actor_table(sent)[sent["actor_id"]]
    for changed, taken in [
        ({}, True),
        ({"JobID": "09000000"}, False),
        ({"State": "DEAD"}, False),
        ({"Address": {"NodeID": "elsewhere"}}, False),
        ({"Pid": 4242}, False),
    ]:
        table = {sent["actor_id"]: {**row, **changed}}
        assert hang_beats.RunWorkers(job_id="05000000", lookup=table.get)(sent) is taken

    def unknown(actor_id):
        raise ValueError("no such actor")

    assert hang_beats.RunWorkers(job_id="05000000", lookup=unknown)(sent) is False
    # judged once, looked up again after RECHECK_S: a worker that died is no sender any more
    clock, table = Clock(0.0), {sent["actor_id"]: row}
    senders = hang_beats.RunWorkers(job_id="05000000", lookup=table.get, clock=clock)
    assert senders(sent)
    table[sent["actor_id"]] = {**row, "State": "DEAD"}
    assert senders(sent)
    clock.now = hang_beats.RECHECK_S
    assert not senders(sent)


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
    from rayfleet.train.control import hang_watch

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


def test_a_drain_message_is_bounded_and_names_only_a_well_formed_instance():
    """suspect.json on a worker's node can be written by a job: its reasons are cut, and the instance comes
    from the host's identity file only when it looks like one."""
    long = {"reasons": ["x" * 5000]}
    assert len(suspect.reason(long, "i-0abc12345")) == len("node suspect on i-0abc12345: ") + suspect.MOST_REASON
    assert suspect.reason({"reasons": ["GPU 0 lost"]}, "i-0abc12345; rm") == "node suspect: GPU 0 lost"
