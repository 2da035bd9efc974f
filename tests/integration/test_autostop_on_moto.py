"""Autostop and start on demand against moto_server's ECS and S3 (the stack Terraform renders:
tools/moto_stack/stack.py).

Autostop scales the real services (moto keeps their desired counts; it runs no task, so the head's snapshot
that start waits for is written here, in the format rayfleet/node/control/head_snapshot.py writes). What moto
cannot show: the capacity providers removing and launching instances, and IAM refusing a worker's role
(the policy is tested in infra/tests/iam.tftest.hcl)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from rayfleet.core import worker_groups
from rayfleet.core.aws import STARTED_BY, Aws
from rayfleet.core.bucket import RAY_STATUS as KEY
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.start import start
from rayfleet.node.control.autostop import Autostop, Settings
from tests.integration.helpers import REPO, control_environment

pytestmark = pytest.mark.integration
IDLE = {"jobs": [{"status": "SUCCEEDED"}], "serve": []}


@pytest.fixture
def stack(aws_stack, monkeypatch):
    """The session's moto stack; its services are put back to their deployed counts afterwards."""
    for key, value in aws_stack["env"].items():
        if key.startswith(("AWS_", "RAYFLEET_")):
            monkeypatch.setenv(key, value)
    out = Outputs.load()
    ecs = aws_stack["server"].client("ecs")
    names = [out.head_service_name, out.group(None).service_name, out.control_service_name]
    before = {
        s["serviceName"]: s["desiredCount"]
        for s in ecs.describe_services(cluster=out.cluster_name, services=names)["services"]
    }
    # Trainer tasks that earlier tests on the shared stack launched (a detached run, say) stay RUNNING in moto,
    # which runs nothing and so never ends them: each of these tests starts from an idle deployment.
    left = ecs.list_tasks(cluster=out.cluster_name, startedBy=STARTED_BY, desiredStatus="RUNNING")["taskArns"]
    for task in left:
        ecs.stop_task(cluster=out.cluster_name, task=task, reason="left running by an earlier test")
    # "ecs": the test's own inspector; "control_ecs": the control task's client, as its role (IAM enforced).
    control_ecs = aws_stack["server"].client_as("ecs", "control")
    s3 = aws_stack["server"].client("s3")
    yield {"out": out, "ecs": ecs, "control_ecs": control_ecs, "s3": s3, "env": aws_stack["env"]}
    for name, count in before.items():
        ecs.update_service(cluster=out.cluster_name, service=name, desiredCount=count)


def control_env(stack) -> dict[str, str]:
    out = stack["out"]
    return control_environment(stack["ecs"], out.cluster_name, out.control_service_name)


def settings_of(stack, idle_s: float, **more) -> Settings:
    """Autostop's settings from the control task's own environment, its idle minutes made `idle_s` and its group's
    min 0 (the harness's one group keeps 2 nodes, infra/one-group.tfvars; infra/'s default groups have min 0)."""
    found = Settings.from_env(control_env(stack))
    assert [g.min_nodes for g in found.groups.values()] == [2]  # what the group's min would leave running
    groups = {name: replace(g, idle_s=idle_s, min_nodes=0) for name, g in found.groups.items()}
    return replace(found, groups=groups, idle_s=idle_s, **more)


def desired(stack) -> dict[str, int]:
    out = stack["out"]
    found = stack["ecs"].describe_services(
        cluster=out.cluster_name,
        services=[out.head_service_name, out.group(None).service_name, out.control_service_name],
    )
    return {s["serviceName"]: s["desiredCount"] for s in found["services"]}


def write_snapshot(stack, workers: int, taken_at: float | None = None) -> None:
    """What the new head's ray-snapshot container writes once Ray sees its workers (taken now, or `taken_at`)."""
    nodes = [{"node_id": "h", "alive": True, "head": True, "address": "10.0.1.5", "resources": {"CPU": 4.0}}]
    nodes += [
        {"node_id": f"w{i}", "alive": True, "head": False, "address": f"10.0.1.{10 + i}", "resources": {"GPU": 1.0}}
        for i in range(workers)
    ]
    taken = datetime.now(UTC) if taken_at is None else datetime.fromtimestamp(taken_at, UTC)
    body = {"taken_at": taken.isoformat(timespec="seconds"), "nodes": nodes, "jobs": [], "serve": []}
    stack["s3"].put_object(Bucket=stack["out"].results_bucket, Key=KEY, Body=json.dumps(body).encode())


class NewHead:
    """The new head's ray-snapshot container: a snapshot every 0.5 s with `workers` alive, until stopped."""

    def __init__(self, stack, workers: int) -> None:
        self.stack, self.workers, self.done = stack, workers, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.wait(0.5):
            write_snapshot(self.stack, self.workers)

    def __enter__(self) -> NewHead:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join()


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


def test_autostop_scales_the_workers_to_zero_after_the_idle_time(stack):
    out, clock = stack["out"], Clock()
    settings = settings_of(stack, 600)
    assert list(settings.groups) == ["default"] and settings.groups["default"].service == out.group(None).service_name
    stopper = Autostop(settings, stack["control_ecs"], clock=clock, say=lambda _: None)
    deployed = desired(stack)
    assert deployed[out.group(None).service_name] >= 1 and deployed[out.head_service_name] == 1
    stopper.tick(IDLE)
    clock.now += 599
    assert not stopper.tick(IDLE)["groups"]["default"]["stopped"] and desired(stack) == deployed
    clock.now += 1
    assert stopper.tick(IDLE)["groups"]["default"]["stopped"]
    assert desired(stack) == {out.head_service_name: 1, out.group(None).service_name: 0, out.control_service_name: 1}


def test_a_running_trainer_task_keeps_the_workers(stack):
    out, clock = stack["out"], Clock()
    ecs = stack["ecs"]
    network = {
        "awsvpcConfiguration": {"subnets": out.private_subnet_ids, "securityGroups": [out.task_security_group_id]}
    }
    task = ecs.run_task(
        cluster=out.cluster_name,
        taskDefinition=out.trainer_task_definition,
        startedBy="rayfleet",
        networkConfiguration=network,
    )
    arn = task["tasks"][0]["taskArn"]
    try:
        settings = settings_of(stack, 60, stop_head=True)
        stopper = Autostop(settings, stack["control_ecs"], clock=clock, say=lambda _: None)
        stopper.tick(IDLE)
        clock.now += 3600
        assert stopper.tick(IDLE)["busy"] == "1 trainer task(s) running"
        assert 0 not in desired(stack).values()
    finally:
        ecs.stop_task(cluster=out.cluster_name, task=arn, reason="test over")
    clock.now += 1
    stopper.tick(IDLE)
    clock.now += 60
    decided = stopper.tick(IDLE)["groups"]
    assert decided["default"]["stopped"] and decided["head"]["stopped"]
    assert set(desired(stack).values()) == {0}  # then all, head and control included


class NewHeadOnPolls(Aws):
    """start()'s AWS, with the new head's ray-snapshot container driven by start's own polls: before its Nth
    read of the snapshot, the snapshot `workers[N]` shows is written to moto's S3 (None: nothing new yet).
    What each poll read (the alive workers, or "old": a snapshot from before the start) is kept in order."""

    def __init__(self, stack, workers: list[int | None]) -> None:
        super().__init__(stack["out"].region)
        self.stack, self.script, self.read = stack, list(workers), []

    def client(self, service: str, *args, **kwargs):
        client = super().client(service, *args, **kwargs)
        return self._watched(client) if service == "s3" else client

    def _watched(self, s3):
        head = self

        class Watched:
            def __getattr__(self, name):
                return getattr(s3, name)

            def get_object(self, **kwargs):
                if kwargs.get("Key") == KEY and head.script and (workers := head.script.pop(0)) is not None:
                    write_snapshot(head.stack, workers)
                answer = s3.get_object(**kwargs)
                if kwargs.get("Key") == KEY:
                    body = json.loads(answer["Body"].read())
                    old = body["taken_at"] < head.began
                    head.read.append("old" if old else sum(1 for n in body["nodes"] if not n["head"]))
                    answer["Body"] = io.BytesIO(json.dumps(body).encode())
                return answer

        return Watched()


def test_start_brings_the_services_back_and_waits_until_ray_sees_the_workers(stack):
    """start() waits through the old head's snapshot and a new one with too few workers, and returns on the
    first that shows them all. taken_at has whole seconds: start's clock here does too (the new head's first
    snapshot may come in the second start began; on ECS it comes minutes later)."""
    out, ecs = stack["out"], stack["ecs"]
    for name in (out.group(None).service_name, out.head_service_name):
        ecs.update_service(cluster=out.cluster_name, service=name, desiredCount=0)
    write_snapshot(stack, 0, taken_at=time.time() - 60)  # the old head's last word: older than the start
    said: list[str] = []
    aws = NewHeadOnPolls(stack, [None, 1, out.group(None).max_nodes, 0])  # the last one must never be read
    began = float(int(time.time()))
    aws.began = datetime.fromtimestamp(began, UTC).isoformat(timespec="seconds")
    clock = lambda: float(int(time.time()))  # noqa: E731
    result = start(aws, out, say=said.append, poll_s=0.01, timeout_s=180, clock=clock)
    assert result["workers"] == out.group(None).max_nodes
    assert aws.read == [
        "old",
        1,
        out.group(None).max_nodes,
    ]  # each poll, in order: it returned on the first complete one
    assert desired(stack) == {
        out.head_service_name: 1,
        out.group(None).service_name: out.group(None).max_nodes,
        out.control_service_name: 1,
    }
    assert said[:3] == [
        f"scaling {out.head_service_name} to 1 ...",
        f"scaling {out.control_service_name} to 1 ...",
        f"scaling {out.group(None).service_name} to {out.group(None).max_nodes} ...",
    ]
    assert "; no snapshot from the new head yet" in said[3]  # the first poll's progress line
    assert said[-1].startswith(
        f"Ray sees the head and {out.group(None).max_nodes}/{out.group(None).max_nodes} workers after"
    )


def run_detached(stack, recipe, name: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "rayfleet.cli.main", "run", str(recipe), "--on=ecs", f"--name={name}", "--detach"]
    return subprocess.run(argv, env=stack["env"], cwd=REPO, capture_output=True, text=True, timeout=180)


def test_make_run_on_a_stopped_deployment_starts_it_first(stack, tmp_path):
    out, ecs = stack["out"], stack["ecs"]
    for service in (out.group(None).service_name, out.head_service_name):  # as `rayfleet deploy stop` leaves it
        ecs.update_service(cluster=out.cluster_name, service=service, desiredCount=0)
    (tmp_path / "train.py").write_text("print('hello')\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps({"name": "wake", "entrypoint": "train.py", "resources": {"workers": 1}}))
    with NewHead(stack, 1):
        result = run_detached(stack, recipe, "wake")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"[rayfleet] {out.head_service_name} at zero (rayfleet deploy stop, or an autostop): starting it first"
        in result.stdout
    )
    assert result.stdout.index("Ray sees the head") < result.stdout.index("run wake: task")  # started, then launched
    assert (
        out.group(None).max_nodes == 2 and desired(stack)[out.group(None).service_name] == 1
    )  # what the recipe needs, no more

    # A run that needs both nodes (a worker takes all of a g5.xlarge's 4 vCPUs) adds the missing one first.
    recipe.write_text(
        json.dumps({"name": "wide", "entrypoint": "train.py", "resources": {"workers": 2, "cpus_per_worker": 4}})
    )
    with NewHead(stack, 2):
        result = run_detached(stack, recipe, "wide")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[rayfleet] the run needs 2 node(s) of worker group default (1 run): adding them first" in result.stdout
    assert desired(stack)[out.group(None).service_name] == 2


def test_capacity_follows_the_queue_up_to_its_need(stack):
    """The control task's queue half on moto's ECS and S3, against the queue as the runs' jobs write it (in a
    folder of its own: other tests' runs queue in the bucket's): the first waiting run raises the worker
    service to what it and the running runs take together (never above the group's maximum, never lowered by
    the queue, a held run asking for nothing). Its other half, autostop taking the workers back to zero once
    nothing runs or waits, is test_autostop_scales_the_workers_to_zero_after_the_idle_time."""
    from rayfleet.core.run_queue import HELD, RUNNING, Entry, Queue
    from rayfleet.node.control.queue_scaling import QueueScaling

    out, ecs = stack["out"], stack["ecs"]
    ecs.update_service(cluster=out.cluster_name, service=out.group(None).service_name, desiredCount=0)  # autostopped
    most = out.group(None).max_nodes
    groups = worker_groups.ecs_groups_from(control_env(stack))  # as the control task reads them
    queue = Queue(f"s3://{out.results_bucket}/capacity-test")
    control_ecs = stack["control_ecs"]  # its S3 reads are this process's (a folder of its own, outside queue/)
    follower = QueueScaling(queue, groups, control_ecs, out.cluster_name, say=lambda _: None)
    now = time.time()

    def entry(run: str, workers: int, **fields) -> Entry:
        given = {"priority": 0, "submitted_at": now, "heartbeat_at": time.time(), **fields}
        return Entry(run=run, workers=workers, cpus_per_worker=4.0, gpus_per_worker=1, **given)

    try:
        queue.put(entry("held", most + 3, state=HELD))  # the budget holds it: it asks for nothing
        assert (
            follower.tick()["default"] == {"wanted": None, "runs": 1}
            and desired(stack)[out.group(None).service_name] == 0
        )
        queue.put(entry("first", 1, state=RUNNING, admitted_at=now))
        queue.put(entry("second", 1, submitted_at=now + 1))
        assert follower.tick()["default"]["raised_from"] == 0
        assert desired(stack)[out.group(None).service_name] == 2  # one node each
        queue.put(entry("big", most + 3, priority=9))  # at the front now: the group's maximum, no more
        assert follower.tick()["default"]["wanted"] == most and desired(stack)[out.group(None).service_name] == most
        for run in ("held", "first", "second", "big"):
            queue.remove(run)
        assert follower.tick()["default"] == {"wanted": None} and desired(stack)[out.group(None).service_name] == most
    finally:
        for run in ("held", "first", "second", "big"):
            queue.remove(run)


def test_autostop_stops_again_what_the_queue_raised_after_it_stopped(stack):
    """Issue 54: autostop re-arms. It scaled the workers to zero; a queue entry (any job can write one) makes the
    follower raise them; the control task's round re-arms autostop (head_snapshot.follow_queue), which stops
    them again once idle. On the old code `stopped` stayed true and the raised workers ran until destroy."""
    from rayfleet.core.run_queue import Entry, Queue
    from rayfleet.node.control.head_snapshot import follow_queue
    from rayfleet.node.control.queue_scaling import QueueScaling

    out, ecs, clock = stack["out"], stack["ecs"], Clock()
    stopper = Autostop(settings_of(stack, 600), ecs, clock=clock, say=lambda _: None)
    stopper.trainer_tasks = lambda: 0  # other tests' detached runs leave trainer tasks in moto: not this test's
    stopper.tick(IDLE)
    clock.now += 600
    assert stopper.tick(IDLE)["groups"]["default"]["stopped"] and desired(stack)[out.group(None).service_name] == 0
    queue = Queue(f"s3://{out.results_bucket}/rearm-test")
    control_ecs = stack["control_ecs"]  # its S3 reads are this process's (a folder of its own, outside queue/)
    groups = worker_groups.ecs_groups_from(control_env(stack))
    follower = QueueScaling(queue, groups, control_ecs, out.cluster_name, say=lambda _: None)
    entry = Entry(run="forged", workers=1, cpus_per_worker=4.0, gpus_per_worker=1, priority=0,
                  submitted_at=time.time(), heartbeat_at=time.time())  # fmt: skip
    try:
        queue.put(entry)
        raised = follower.tick()
        assert raised["default"]["raised_from"] == 0 and desired(stack)[out.group(None).service_name] == 1
        follow_queue(stopper, raised)
        clock.now += 599
        assert not stopper.tick(IDLE)["groups"]["default"]["stopped"]
        assert desired(stack)[out.group(None).service_name] == 1
        clock.now += 1
        assert stopper.tick(IDLE)["groups"]["default"]["stopped"] and desired(stack)[out.group(None).service_name] == 0
    finally:
        queue.remove("forged")
