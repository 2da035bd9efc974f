"""The control task's dispatch of runs waiting for a driver slot, on launches kept in a local folder (the
same RunDir code as s3://) and an ECS that answers as told; with moto's RunTask:
tests/integration/test_driver_slots_on_moto.py."""

from __future__ import annotations

from rayfleet.core.launch_queue import Launches, Pending
from rayfleet.node.control.driver_dispatch import DriverDispatch

FULL = {"tasks": [], "failures": [{"reason": "RESOURCE:MEMORY", "detail": "head instance full"}]}


class Ecs:
    """Answers RunTask from `answers`, in order, and keeps what it was asked."""

    def __init__(self, *answers: dict):
        self.answers, self.asked = list(answers), []

    def run_task(self, **request):
        self.asked.append(request)
        return self.answers.pop(0)


def pending(run: str, priority: int = 0, at: float = 100.0, cluster: str = "c") -> Pending:
    return Pending(run, priority, at, {"cluster": cluster, "taskDefinition": "trainer:3", "count": 1})


def test_only_the_first_in_line_is_tried_and_a_refusal_is_written_when_it_changes(tmp_path):
    launches = Launches(str(tmp_path))
    for p in (pending("early"), pending("late", at=200.0), pending("urgent", priority=3, at=300.0)):
        launches.put(p)
    ecs = Ecs(FULL, FULL)
    dispatch = DriverDispatch(launches, ecs, "c", clock=lambda: 400.0)
    assert dispatch.tick() == {
        "first": "urgent",
        "waiting": 3,
        "why": "ECS placed no task: RESOURCE:MEMORY (head instance full)",
    }
    assert dispatch.tick()["first"] == "urgent"
    assert [r["count"] for r in ecs.asked] == [1, 1] and len(ecs.asked) == 2  # never the runs behind: no backfill
    assert launches.get("urgent").why.startswith("ECS placed no task") and launches.get("early").why == ""
    assert launches.get("urgent").tries == 1  # written at the change only; the second refusal was the same


def test_a_placed_trainer_leaves_the_line_with_its_task_arn(tmp_path):
    launches = Launches(str(tmp_path))
    launches.put(pending("a"))
    launches.put(pending("b", at=150.0))
    lines: list[str] = []
    ecs = Ecs({"tasks": [{"taskArn": "arn:aws:ecs:r:1:task/c/abc"}], "failures": []})
    done = DriverDispatch(launches, ecs, "c", clock=lambda: 160.0, say=lines.append).tick()
    assert done == {"first": "a", "waiting": 1, "started": "arn:aws:ecs:r:1:task/c/abc"}
    placed = launches.get("a")
    assert (placed.task_arn, placed.started_at, placed.tries) == ("arn:aws:ecs:r:1:task/c/abc", 160.0, 1)
    assert lines == ["launches: a's trainer placed after 60 s and 1 tries: arn:aws:ecs:r:1:task/c/abc"]
    assert [p.run for p in launches.waiting()] == ["b"] and launches.position("b") == 1


def test_a_launch_naming_another_cluster_is_never_sent_and_cancel_takes_only_a_waiting_one(tmp_path):
    launches = Launches(str(tmp_path))
    launches.put(pending("elsewhere", cluster="other"))
    ecs = Ecs()
    assert "names cluster 'other', not ours" in DriverDispatch(launches, ecs, "c").tick()["why"]
    assert ecs.asked == []
    assert launches.cancel("elsewhere") and launches.get("elsewhere") is None
    started = pending("started")
    started.task_arn = "arn:task"
    launches.put(started)
    assert not launches.cancel("started") and launches.get("started") is not None  # it runs: its job stops it
    assert not launches.cancel("unknown")
    assert DriverDispatch(launches, ecs, "c").tick() is None
