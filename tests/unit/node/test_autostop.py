"""Autostop's idle logic with a fake clock and a recording ECS client (against moto: tests/integration/
test_autostop_on_moto.py)."""

from __future__ import annotations

import pytest

from rayfleet.node.autostop import Autostop, Settings, busy_because


class Ecs:
    def __init__(self) -> None:
        self.trainers: list[str] = []
        self.updates: list[tuple[str, int]] = []

    def list_tasks(self, cluster: str, startedBy: str, desiredStatus: str) -> dict:
        assert (cluster, startedBy, desiredStatus) == ("rf", "rayfleet", "RUNNING")
        return {"taskArns": list(self.trainers)}

    def update_service(self, cluster: str, service: str, desiredCount: int) -> None:
        self.updates.append((service, desiredCount))


class Clock:
    now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


IDLE = {"jobs": [{"status": "SUCCEEDED"}, {"status": "FAILED"}], "serve": []}
SETTINGS = Settings("rf", "rf-ray-head", "rf-ray-worker", idle_s=30 * 60)


@pytest.mark.parametrize(
    ("snapshot", "trainers", "why"),
    [
        ({"jobs": [{"status": "RUNNING"}, {"status": "SUCCEEDED"}]}, 0, "1 Ray job(s) running"),
        ({"jobs": [{"status": "PENDING"}]}, 0, "1 Ray job(s) running"),
        ({"jobs": [], "serve": [{"name": "chat", "status": "RUNNING"}]}, 0, "serving chat"),
        (IDLE, 1, "1 trainer task(s) running"),
        (IDLE, 0, None),
        ({"jobs": [], "serve": [{"name": "old", "status": "DELETING"}]}, 0, None),
        # a run the hang watchdog holds hung is no work: its job, and its trainer task on ECS
        ({"jobs": [{"status": "RUNNING"}], "hung_runs": ["r1"]}, 1, None),
        ({"jobs": [{"status": "RUNNING"}] * 2, "hung_runs": ["r1"]}, 0, "1 Ray job(s) running (1 more hung)"),
        ({**IDLE, "hung_runs": ["r1"]}, 2, "1 trainer task(s) running"),
        # `make serve` kept a config: serving, also on a head that started again without the application
        (
            {**IDLE, "serve_kept": {"run": "clf", "reapplied": ["rayfleet"]}},
            0,
            "serving run clf (kept: make serve-down ends it)",
        ),
        (
            {**IDLE, "serve_kept": {"error": "ClientError: x"}},
            0,
            "maybe serving (the kept Serve config is unreadable: ClientError: x)",
        ),
        ({**IDLE, "serve_kept": None}, 0, None),
        # a run waiting for a driver slot (behind a hung run's trainer, say) is work that will start
        (
            {**IDLE, "hung_runs": ["r1"], "launches": {"first": "r2", "waiting": 1}},
            1,
            "1 run(s) waiting for a driver slot",
        ),
        ({**IDLE, "launches": None}, 0, None),
    ],
)
def test_what_counts_as_busy(snapshot, trainers, why):
    assert busy_because(snapshot, trainers) == why


def test_the_workers_stop_after_the_idle_time_and_once():
    ecs, clock = Ecs(), Clock()
    stopper = Autostop(SETTINGS, ecs, clock=clock, say=lambda _: None)
    first = stopper.tick(IDLE)
    assert first["stops_at"] == "2027-01-15T08:30:00+00:00" and not first["stopped"] and not ecs.updates
    clock.now += 29 * 60
    assert not stopper.tick(IDLE)["stopped"] and not ecs.updates
    clock.now += 60
    assert stopper.tick(IDLE)["stopped"] and ecs.updates == [("rf-ray-worker", 0)]
    clock.now += 60
    stopper.tick(IDLE)
    assert ecs.updates == [("rf-ray-worker", 0)]  # once, not every snapshot


def test_activity_resets_the_clock_and_a_later_idle_spell_stops_again():
    ecs, clock = Ecs(), Clock()
    settings = Settings(
        "rf", "rf-ray-head", "rf-ray-worker", idle_s=600, stop_head=True, control_service="rf-ray-control"
    )
    stopper = Autostop(settings, ecs, clock=clock)
    stopper.tick(IDLE)
    clock.now += 500
    ecs.trainers = ["arn:trainer"]  # a trainer task still pulling its image: not idle
    assert stopper.tick(IDLE) == {"idle_min": 10, "busy": "1 trainer task(s) running"}
    ecs.trainers = []
    clock.now += 500
    assert not stopper.tick(IDLE)["stopped"]  # the idle spell began again at the last busy snapshot
    clock.now += 600
    decided = stopper.tick(IDLE)
    assert decided["stopped"] and decided["stops"] == ["rf-ray-worker", "rf-ray-head", "rf-ray-control"]
    # workers first, then the head, then the control task itself (it would keep the head's instance up)
    assert ecs.updates == [("rf-ray-worker", 0), ("rf-ray-head", 0), ("rf-ray-control", 0)]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),  # not on ECS: no services to scale
        ({"RAYFLEET_AUTOSTOP_IDLE_MIN": "0"}, None),  # off
        ({"RAYFLEET_AUTOSTOP_IDLE_MIN": "45", "RAYFLEET_AUTOSTOP_HEAD": "true"}, (45 * 60, True)),
        ({}, (30 * 60, False)),
    ],
)
def test_settings_from_the_task_environment(env, expected):
    names = {"RAYFLEET_CLUSTER_NAME": "rf", "RAYFLEET_HEAD_SERVICE": "h", "RAYFLEET_WORKER_SERVICE": "w"}
    full = env if expected is None and not env else {**names, **env}
    settings = Settings.from_env(full)
    assert (settings and (settings.idle_s, settings.stop_head)) == expected
