"""Autostop's idle logic with a fake clock and a recording ECS client (against moto: tests/integration/
test_autostop_on_moto.py)."""

from __future__ import annotations

import json

import pytest

from rayfleet.node.control.autostop import Autostop, GroupStop, Settings, busy_because, groups_in_use


class Ecs:
    def __init__(self) -> None:
        self.trainers: list[str] = []
        self.updates: list[tuple[str, int]] = []
        self.desired: dict[str, int] = {}

    def describe_services(self, cluster: str, services: list[str]) -> dict:
        assert cluster == "rf"
        return {"services": [{"serviceName": s, "desiredCount": self.desired.get(s, 1)} for s in services]}

    def list_tasks(self, cluster: str, startedBy: str, desiredStatus: str) -> dict:
        assert (cluster, startedBy, desiredStatus) == ("rf", "rayfleet", "RUNNING")
        return {"taskArns": list(self.trainers)}

    def update_service(self, cluster: str, service: str, desiredCount: int) -> None:
        self.updates.append((service, desiredCount))
        self.desired[service] = desiredCount


class Clock:
    now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


IDLE = {"jobs": [{"status": "SUCCEEDED"}, {"status": "FAILED"}], "serve": []}
RUN_1 = {"job_id": "02000000", "status": "RUNNING", "metadata": {"rayfleet_run": "r1"}}
RUN_2 = {"job_id": "03000000", "status": "RUNNING", "metadata": {"rayfleet_run": "r2"}}
MARK_1 = {"run": "r1", "job_id": "02000000"}  # the marker job 02000000's hang watchdog made (hung_runs.markers)
ONE = {"default": GroupStop("rf-ray-worker", idle_s=30 * 60)}
SETTINGS = Settings("rf", "rf-ray-head", ONE, idle_s=30 * 60)


def one_group(idle_s: float, **kw) -> Settings:
    return Settings("rf", "rf-ray-head", {"default": GroupStop("rf-ray-worker", idle_s=idle_s)}, idle_s=idle_s, **kw)


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
        ({"jobs": [RUN_1], "hung_markers": [MARK_1]}, 1, None),
        ({"jobs": [RUN_1, RUN_2], "hung_markers": [MARK_1]}, 0, "1 Ray job(s) running (1 more hung)"),
        ({**IDLE, "hung_markers": [MARK_1]}, 2, "2 trainer task(s) running"),  # no unfinished job it holds
        ({"jobs": [{**RUN_1, "status": "SUCCEEDED"}, RUN_2], "hung_markers": [MARK_1]}, 1, "1 Ray job(s) running"),
        # `make serve` kept a config: serving, also on a head that started again without the application
        (
            {**IDLE, "serve_kept": {"run": "clf", "reapplied": ["rayfleet"]}},
            0,
            "serving run clf (kept: rayfleet serve down ends it)",
        ),
        (
            {**IDLE, "serve_kept": {"error": "ClientError: x"}},
            0,
            "maybe serving (the kept Serve config is unreadable: ClientError: x)",
        ),
        ({**IDLE, "serve_kept": None}, 0, None),
        # a run waiting for a driver slot (behind a hung run's trainer, say) is work that will start
        (
            {"jobs": [RUN_1], "hung_markers": [MARK_1], "launches": {"first": "r2", "waiting": 1}},
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
    first = stopper.tick(IDLE)["groups"]["default"]
    assert first["stops_at"] == "2027-01-15T08:30:00+00:00" and not first["stopped"] and not ecs.updates
    clock.now += 29 * 60
    assert not stopper.tick(IDLE)["groups"]["default"]["stopped"] and not ecs.updates
    clock.now += 60
    assert stopper.tick(IDLE)["groups"]["default"]["stopped"] and ecs.updates == [("rf-ray-worker", 0)]
    clock.now += 60
    stopper.tick(IDLE)
    assert ecs.updates == [("rf-ray-worker", 0)]  # once, not every snapshot


def test_activity_resets_the_clock_and_a_later_idle_spell_stops_again():
    ecs, clock = Ecs(), Clock()
    settings = one_group(600, stop_head=True, control_service="rf-ray-control")
    stopper = Autostop(settings, ecs, clock=clock)
    stopper.tick(IDLE)
    clock.now += 500
    ecs.trainers = ["arn:trainer"]  # a trainer task still pulling its image: not idle
    assert stopper.tick(IDLE) == {"idle_min": 10, "busy": "1 trainer task(s) running"}
    ecs.trainers = []
    clock.now += 500
    assert not stopper.tick(IDLE)["groups"]["default"]["stopped"]  # the idle spell began again when busy ended
    clock.now += 600
    decided = stopper.tick(IDLE)["groups"]
    assert decided["default"]["stopped"] and decided["default"]["stops"] == ["rf-ray-worker"]
    assert decided["head"]["stopped"] and decided["head"]["stops"] == ["rf-ray-head", "rf-ray-control"]
    # workers first, then the head, then the control task itself (it would keep the head's instance up)
    assert ecs.updates == [("rf-ray-worker", 0), ("rf-ray-head", 0), ("rf-ray-control", 0)]


def test_the_head_never_stops_while_a_group_keeps_nodes():
    """autostop.head with a group whose min is above zero (or that never autostops): the head would stop and leave
    its workers running with no head, so it stays."""
    group = {"service": "w", "vcpus": 4, "gpus": 1, "memory_mib": 16384, "max": 2, "idle_minutes": 30}
    for kept in ({"min": 2}, {"min": 0, "idle_minutes": 0}):
        env = {"RAYFLEET_CLUSTER_NAME": "rf", "RAYFLEET_HEAD_SERVICE": "h", "RAYFLEET_AUTOSTOP_HEAD": "true"}
        env["RAYFLEET_WORKER_GROUPS"] = json.dumps({"a": {**group, "min": 0}, "b": {**group, **kept}})
        assert Settings.from_env(env).stop_head is False
    env["RAYFLEET_WORKER_GROUPS"] = json.dumps({"a": {**group, "min": 0}})
    assert Settings.from_env(env).stop_head is True


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),  # not on ECS: no services to scale
        # the deployment's 0 keeps the head up; the group's own 30 minutes still stop it (Terraform gives a group
        # without minutes of its own the deployment's: 0, never, as in the next test)
        ({"RAYFLEET_AUTOSTOP_IDLE_MIN": "0", "RAYFLEET_AUTOSTOP_HEAD": "true"}, (0, False)),
        ({"RAYFLEET_AUTOSTOP_IDLE_MIN": "45", "RAYFLEET_AUTOSTOP_HEAD": "true"}, (45 * 60, True)),
        ({}, (30 * 60, False)),
    ],
)
def test_settings_from_the_task_environment(env, expected):
    groups = {
        "ddp": {"service": "w", "vcpus": 4, "gpus": 1, "memory_mib": 16384, "min": 0, "max": 2, "idle_minutes": 30}
    }
    names = {"RAYFLEET_CLUSTER_NAME": "rf", "RAYFLEET_HEAD_SERVICE": "h", "RAYFLEET_WORKER_GROUPS": json.dumps(groups)}
    full = env if expected is None and not env else {**names, **env}
    settings = Settings.from_env(full)
    assert (settings and (settings.idle_s, settings.stop_head)) == expected
    if settings is not None:
        assert settings.groups["ddp"].idle_s == 30 * 60


def test_autostop_is_off_when_no_group_stops():
    group = {"service": "w", "vcpus": 4, "gpus": 1, "memory_mib": 16384, "min": 0, "max": 2, "idle_minutes": 0}
    env = {"RAYFLEET_CLUSTER_NAME": "rf", "RAYFLEET_HEAD_SERVICE": "h", "RAYFLEET_AUTOSTOP_IDLE_MIN": "0"}
    assert Settings.from_env({**env, "RAYFLEET_WORKER_GROUPS": json.dumps({"ddp": group})}) is None


@pytest.mark.parametrize(
    ("markers", "why"),
    [
        # another job (03000000) names a marker after run r1: it holds nothing, neither r1 nor itself
        ([{"run": "r1", "job_id": "03000000"}], "2 Ray job(s) running"),
        # a job's marker under another run's name does not hold the job that names its run r2
        ([{"run": "r1", "job_id": "03000000"}, {"run": "r9", "job_id": "03000000"}], "2 Ray job(s) running"),
        # markers of finished or unknown jobs, and as many as a job likes of one job: one job each at most
        ([{"run": "r1", "job_id": "09000000"}], "2 Ray job(s) running"),
        ([MARK_1, MARK_1, {"run": "r1", "job_id": "02000000"}], "1 Ray job(s) running (1 more hung)"),
    ],
)
def test_a_hung_marker_counts_only_for_the_unfinished_job_that_made_it(markers, why):
    """R4: actors named rayfleet-hung-* by a job cannot make a busy cluster look idle (on the old code every
    such name subtracted one job, whoever made it, whatever run it named)."""
    snapshot = {"jobs": [RUN_1, RUN_2], "hung_markers": markers, "hung_runs": ["r1", "r2", "x"]}
    assert busy_because(snapshot, 2) == why


def test_a_plain_driver_job_is_held_by_its_own_marker():
    """A job that names no run (a plain driver: `python -m rayfleet.train.ddp` on ECS) is held by a marker its
    own job made, under any run name."""
    driver = {"job_id": "04000000", "status": "RUNNING", "metadata": {}}
    assert busy_because({"jobs": [driver], "hung_markers": [{"run": "ddp-9", "job_id": "04000000"}]}, 0) is None
    assert busy_because({"jobs": [driver], "hung_markers": [MARK_1]}, 0) == "1 Ray job(s) running"


def apps(status: str) -> dict:
    return {**IDLE, "serve": [{"name": "chat", "status": status}]}


def test_a_failed_serve_application_does_not_keep_the_gpus():
    """DEPLOY_FAILED is no work at once; UNHEALTHY is work for the grace (Serve replaces replicas by itself),
    then no more; an application kept by `make serve` whose applications all failed does not keep them
    either. On the old code both counted as serving for as long as they stayed so."""
    ecs, clock = Ecs(), Clock()
    stopper = Autostop(one_group(600), ecs, clock=clock, say=print)
    kept = {"serve_kept": {"run": "clf", "applications": ["chat"], "reapplied": []}}
    decided = stopper.tick({**apps("DEPLOY_FAILED"), **kept})
    assert "busy" not in decided and decided["not_work"] == ["Serve application chat: failed or unhealthy too long"]
    clock.now += 600
    assert stopper.tick(apps("DEPLOY_FAILED"))["groups"]["default"]["stopped"] and ecs.updates == [("rf-ray-worker", 0)]

    ecs, clock = Ecs(), Clock()
    stopper = Autostop(one_group(600), ecs, clock=clock, say=print)
    assert stopper.tick(apps("UNHEALTHY"))["busy"] == "serving chat"
    clock.now += 14 * 60
    assert stopper.tick(apps("UNHEALTHY"))["busy"] == "serving chat"
    clock.now += 60
    assert "busy" not in stopper.tick({**apps("UNHEALTHY"), **kept})  # 15 min unhealthy: no more work
    assert stopper.tick(apps("RUNNING"))["busy"] == "serving chat"  # recovered
    assert stopper.tick(apps("UNHEALTHY"))["busy"] == "serving chat"  # a new spell gets its own grace


def test_a_service_raised_after_autostop_stopped_it_is_stopped_again_once_idle():
    """Autostop re-arms: after it scaled the workers to 0, the queue's capacity (or anyone) raises them; on the
    old code `stopped` stayed true and nothing ever stopped them again."""
    ecs, clock = Ecs(), Clock()
    said: list[str] = []
    stopper = Autostop(one_group(600), ecs, clock=clock, say=said.append)
    stopper.tick(IDLE)
    clock.now += 600
    assert stopper.tick(IDLE)["groups"]["default"]["stopped"] and ecs.updates == [("rf-ray-worker", 0)]
    clock.now += 60
    assert stopper.tick(IDLE)["groups"]["default"]["stopped"]  # still at zero: nothing to do
    ecs.desired["rf-ray-worker"] = 2  # a forged queue entry, say: the follower raised the workers
    clock.now += 60
    decided = stopper.tick(IDLE)["groups"]["default"]
    assert not decided["stopped"] and "rf-ray-worker at 2 since it stopped it" in said[-1]
    clock.now += 599
    assert not stopper.tick(IDLE)["groups"]["default"]["stopped"]
    clock.now += 1
    assert stopper.tick(IDLE)["groups"]["default"]["stopped"] and ecs.updates == [("rf-ray-worker", 0)] * 2


def test_rearm_from_the_queue_follower_is_said_once():
    ecs, clock = Ecs(), Clock()
    said: list[str] = []
    stopper = Autostop(one_group(60), ecs, clock=clock, say=said.append)
    stopper.tick(IDLE)
    clock.now += 60
    stopper.tick(IDLE)
    stopper.rearm("the queue raised rf-ray-worker 0 -> 1", ["default"])
    stopper.rearm("again", ["default"])  # not stopped any more: nothing to say
    assert not stopper.stopped["default"]
    assert said[-1].startswith("autostop: the queue raised rf-ray-worker 0 -> 1: default stops again")


def test_each_group_has_its_own_idle_minutes_and_goes_to_its_min():
    """Per group: its own idle minutes, its service to its min (not zero); the head, with stop_head, after the
    deployment's own idle minutes and never before every group has stopped."""
    ecs, clock = Ecs(), Clock()
    groups = {"ddp": GroupStop("rf-ddp", 0, 600), "fsdp": GroupStop("rf-fsdp", 1, 1200)}
    stopper = Autostop(Settings("rf", "rf-ray-head", groups, idle_s=900, stop_head=True), ecs, clock=clock)
    stopper.tick(IDLE)
    clock.now += 600
    decided = stopper.tick(IDLE)["groups"]
    assert decided["ddp"]["stopped"] and not decided["fsdp"]["stopped"] and not decided["head"]["stopped"]
    assert ecs.updates == [("rf-ddp", 0)]
    clock.now += 300
    assert not stopper.tick(IDLE)["groups"]["head"]["stopped"]  # idle past its 900 s, but fsdp is still up
    clock.now -= 300
    clock.now += 600
    decided = stopper.tick(IDLE)["groups"]
    assert decided["fsdp"]["stopped"] and decided["head"]["stopped"]  # idle 1200 s > its 900, and now last
    assert ecs.updates == [("rf-ddp", 0), ("rf-fsdp", 1), ("rf-ray-head", 0)]


RUNS_ON_DDP = {"ddp": {"wanted": None, "runs": 1}, "fsdp": {"wanted": None}}


@pytest.mark.parametrize(
    ("snapshot", "trainers", "in_use"),
    [
        ({"jobs": [RUN_1], "queue_capacity": RUNS_ON_DDP}, 1, {"ddp"}),
        # more jobs (or trainer tasks) than queued runs: work no group holds, every group is busy
        ({"jobs": [RUN_1, RUN_2], "queue_capacity": RUNS_ON_DDP}, 1, None),
        ({"jobs": [RUN_1], "queue_capacity": RUNS_ON_DDP}, 2, None),
        ({"jobs": [RUN_1], "queue_capacity": RUNS_ON_DDP, "serve": [{"name": "chat", "status": "RUNNING"}]}, 1, None),
        ({"jobs": [RUN_1]}, 1, None),  # no queue view this round
        ({"jobs": [RUN_1], "queue_capacity": {"error": "S3 away"}}, 1, None),
    ],
)
def test_which_groups_a_busy_cluster_uses(snapshot, trainers, in_use):
    assert groups_in_use(snapshot, trainers) == in_use


def test_a_group_no_run_uses_stops_while_another_trains():
    """A run on ddp keeps ddp (and the head) up; the idle fsdp group stops after its minutes. On the single-group
    code every group stayed up while any job ran."""
    ecs, clock = Ecs(), Clock()
    groups = {"ddp": GroupStop("rf-ddp", 0, 600), "fsdp": GroupStop("rf-fsdp", 0, 600)}
    stopper = Autostop(Settings("rf", "rf-ray-head", groups, idle_s=600), ecs, clock=clock)
    ecs.trainers = ["arn:trainer"]
    busy = {"jobs": [RUN_1], "queue_capacity": RUNS_ON_DDP}
    assert stopper.tick(busy)["groups"]["ddp"] == {"busy": True}
    clock.now += 600
    decided = stopper.tick(busy)
    assert decided["busy"] == "1 Ray job(s) running" and decided["groups"]["ddp"] == {"busy": True}
    assert decided["groups"]["fsdp"]["stopped"] and ecs.updates == [("rf-fsdp", 0)]
