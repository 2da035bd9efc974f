"""`rayfleet run` waiting for a driver slot on ECS (rayfleet/targets/ecs_slot.py), on launches in a local folder."""

from __future__ import annotations

import pytest

from rayfleet.core import stop_request
from rayfleet.core.launch_queue import Launches, Pending
from rayfleet.core.run_dir import RunDir
from rayfleet.targets.ecs_slot import CANCELLED_WAITING, wait_for_slot


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_it_says_where_it_stands_each_minute_and_returns_the_trainer_once_placed(tmp_path, capsys):
    launches, run_dir, clock = Launches(str(tmp_path)), RunDir(str(tmp_path / "runs"), "r"), Clock()
    launches.put(Pending("r", 0, 0.0, {}, why="RESOURCE:MEMORY"))

    def sleep(seconds: float) -> None:
        clock.now += seconds
        if clock.now >= 125:  # the control task places it
            placed = launches.get("r")
            placed.task_arn = "arn:task/c/1"
            launches.put(placed)

    assert wait_for_slot(launches, run_dir, clock=clock, sleep=sleep) == "arn:task/c/1"
    out = capsys.readouterr().out
    assert out.count("still waiting for a driver slot (position 1; RESOURCE:MEMORY)") == 2  # at 60 s and 120 s
    assert "its trainer has a driver slot after" in out


def test_a_launch_removed_meanwhile_was_cancelled_and_ctrl_c_cancels_it(tmp_path, capsys):
    launches, run_dir = Launches(str(tmp_path)), RunDir(str(tmp_path / "runs"), "r")
    assert wait_for_slot(launches, run_dir, sleep=lambda s: None) is None
    assert "was cancelled before its trainer started" in capsys.readouterr().err
    launches.put(Pending("r", 0, 0.0, {}))

    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        wait_for_slot(launches, run_dir, clock=lambda: 0.0, sleep=interrupt)
    assert launches.get("r") is None and stop_request.requested(run_dir) == stop_request.CANCELLED
    assert run_dir.record()["state"] == "CANCELLED" and run_dir.record()["message"] == CANCELLED_WAITING
