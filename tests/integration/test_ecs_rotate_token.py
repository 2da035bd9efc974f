"""rayfleet token rotate on a real moto_server: a new secret version, the head replaced before every other
service that holds the token (the workers, the control task) is restarted, jobs protected, the token never
printed, and afterwards no running task holds an old version.

moto accepts UpdateService(forceNewDeployment) but replaces no task, so a small stand-in for the ECS
service scheduler does it: when the verb announces a restart, it stops the service's tasks and starts new
ones (group service:<name>) after a delay, recording when."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from tests.integration.helpers import verbs_env
from tools.moto_stack import stack

pytestmark = pytest.mark.integration
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def deployed(ecs_moto, tmp_path):
    outputs = stack.create(ecs_moto, tmp_path, trainer_slots=1)  # Terraform's sizes: the head and one trainer
    env = verbs_env(ecs_moto.url, outputs["outputs_file"], stack.REGION)
    return {"moto": ecs_moto, "outputs": outputs, "env": env}


def service_tasks(ecs, service: str, cluster: str) -> list[dict]:
    arns = ecs.list_tasks(cluster=cluster, desiredStatus="RUNNING")["taskArns"]
    tasks = ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if arns else []
    return [t for t in tasks if t.get("group") == f"service:{service}"]


def replace_tasks(deployed, service: str, delay: float, events: list) -> None:
    moto, out = deployed["moto"], deployed["outputs"]
    ecs, cluster = moto.client("ecs"), out["cluster_name"]
    time.sleep(delay)
    old = service_tasks(ecs, service, cluster)
    for task in old:
        ecs.stop_task(cluster=cluster, task=task["taskArn"], reason="new deployment")
    definition = old[0]["taskDefinitionArn"]
    network = {
        "awsvpcConfiguration": {
            "subnets": out["private_subnet_ids"],
            "securityGroups": [out["task_security_group_id"]],
            "assignPublicIp": "DISABLED",
        }
    }
    started = ecs.run_task(
        cluster=cluster,
        taskDefinition=definition,
        count=len(old),
        group=f"service:{service}",
        startedBy="ecs-svc/1",
        networkConfiguration=network,
    )
    for task in started["tasks"]:  # the manual transition leaves them PROVISIONING; ECS would get them RUNNING
        for _ in range(3):
            ecs.describe_tasks(cluster=cluster, tasks=[task["taskArn"]])
    events.append(("replaced", service, time.monotonic()))


# `rayfleet token rotate`'s one call, in a process of its own, polling ECS every 0.5 s instead of 5 s
ROTATE = (
    "import sys; from rayfleet.core.aws import run_cli; from rayfleet.ecs.rotate_token import rotate_token; "
    "sys.exit(run_cli(lambda _argv: rotate_token(poll_s=0.5)))"
)


def run_rotation(deployed, delay: float = 2.0):
    """Run the verb; act as the ECS scheduler for each service it restarts."""
    events = []
    proc = subprocess.Popen(
        [sys.executable, "-c", ROTATE],
        cwd=REPO,
        env=deployed["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    threads, lines = [], []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("restarting "):
            service = line.split()[1]
            events.append(("restarting", service, time.monotonic()))
            thread = threading.Thread(target=replace_tasks, args=(deployed, service, delay, events))
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()
    stderr = proc.stderr.read()
    return proc.wait(timeout=60), "".join(lines), stderr, events


def settle(ecs, cluster: str, services) -> None:
    """moto moves tasks on describe; make the initial service tasks RUNNING as ECS would have."""
    for service in services:
        for task in service_tasks(ecs, service, cluster):
            for _ in range(3):
                ecs.describe_tasks(cluster=cluster, tasks=[task["taskArn"]])


def rendered_holders(out: dict) -> set[str]:
    """The registered task definitions whose rendered containers read the Ray token (their `secrets`)."""
    picture, arn = out["picture"], out["picture"]["outputs"]["ray_token_secret_arn"]
    return {
        out["task_definitions"][key]
        for key, spec in picture["taskDefinitions"].items()
        if any(s["valueFrom"] == arn for c in spec["containerDefinitions"] for s in c.get("secrets") or [])
    }


def running(ecs, cluster: str) -> list[dict]:
    arns = ecs.list_tasks(cluster=cluster, desiredStatus="RUNNING")["taskArns"]
    return ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if arns else []


def test_after_a_rotation_no_running_task_holds_an_old_token(deployed):
    """Every task whose definition reads the token (from Terraform's rendering, not a list kept here: the head,
    the workers and the control task, which reads it once at start) was started after the new version was
    written, so ECS handed it that version; a task left from before would hold the old one."""
    ecs, out = deployed["moto"].client("ecs"), deployed["outputs"]
    cluster = out["cluster_name"]
    holders = rendered_holders(out)
    settle(ecs, cluster, [s["serviceName"] for s in out["picture"]["services"]])
    before = {t["taskArn"] for t in running(ecs, cluster) if t["taskDefinitionArn"] in holders}
    assert {t["group"] for t in running(ecs, cluster) if t["taskArn"] in before} == {
        f"service:{s['serviceName']}" for s in out["picture"]["services"]
    }  # every service of the picture holds the token, the control task's included
    code, stdout, stderr, _ = run_rotation(deployed)
    assert code == 0, stderr
    after = [t for t in running(ecs, cluster) if t["taskDefinitionArn"] in holders]
    assert after and not before & {t["taskArn"] for t in after}, "a task started before the rotation still runs"
    assert out["control_service_name"] in stdout.splitlines()[-1]


def test_rotation_writes_a_new_version_and_restarts_head_then_workers(deployed):
    sm, ecs = deployed["moto"].client("secretsmanager"), deployed["moto"].client("ecs")
    out = deployed["outputs"]
    cluster, head, worker = (
        out["cluster_name"],
        out["head_service_name"],
        out["worker_groups"]["default"]["service_name"],
    )
    arn = out["ray_token_secret_arn"]
    before = sm.get_secret_value(SecretId=arn)
    control = out["control_service_name"]
    settle(ecs, cluster, (head, worker, control))
    old_head = {t["taskArn"] for t in service_tasks(ecs, head, cluster)}
    code, stdout, stderr, events = run_rotation(deployed)
    assert code == 0, stderr
    after = sm.get_secret_value(SecretId=arn)
    assert after["VersionId"] != before["VersionId"] and after["SecretString"] != before["SecretString"]
    assert len(after["SecretString"]) == 64
    assert after["SecretString"] not in stdout + stderr and before["SecretString"] not in stdout + stderr
    order = [(kind, service) for kind, service, _ in events]
    assert order[:2] == [("restarting", head), ("replaced", head)]  # the head first: the others need it
    later = [(kind, service) for kind, service in order[2:]]
    assert sorted(later) == sorted([(k, s) for s in (worker, control) for k in ("restarting", "replaced")])
    assert all(later.index(("restarting", s)) < later.index(("replaced", s)) for s in (worker, control))
    head_replaced = events[1][2]
    assert all(when >= head_replaced for _, _, when in events[2:])  # the workers and the control task wait
    assert not old_head & {t["taskArn"] for t in service_tasks(ecs, head, cluster)}
    assert len(service_tasks(ecs, worker, cluster)) == 2


def test_rotation_refuses_while_a_job_runs(deployed):
    moto, out = deployed["moto"], deployed["outputs"]
    ecs = moto.client("ecs")
    started = ecs.run_task(
        cluster=out["cluster_name"],
        taskDefinition=out["trainer_task_definition"],
        startedBy="rayfleet",
        networkConfiguration={
            "awsvpcConfiguration": {
                "subnets": out["private_subnet_ids"],
                "securityGroups": [out["task_security_group_id"]],
            }
        },
    )
    assert len(started["tasks"]) == 1, started["failures"]  # beside the head, as Terraform sizes them
    arn = deployed["outputs"]["ray_token_secret_arn"]
    before = moto.client("secretsmanager").get_secret_value(SecretId=arn)["VersionId"]
    code, _, stderr, events = run_rotation(deployed)
    assert code == 1
    assert stderr.strip() == "error: 1 job(s) running would lose the cluster: wait, `rayfleet deploy stop`, or --force"
    assert not events
    assert moto.client("secretsmanager").get_secret_value(SecretId=arn)["VersionId"] == before


def test_rotation_refuses_while_make_serve_keeps_an_application(deployed):
    """A served application (kept by `make serve`, rayfleet/core/serve_kept.py) holds the head as a job does: the
    new head would get it back, but it would stop answering meanwhile."""
    from rayfleet.core import serve_kept as kept

    moto, out = deployed["moto"], deployed["outputs"]
    kept.keep(moto.client("s3"), out["results_bucket"], "clf", {"applications": [{"name": "rayfleet"}]})
    arn = out["ray_token_secret_arn"]
    before = moto.client("secretsmanager").get_secret_value(SecretId=arn)["VersionId"]
    code, _, stderr, events = run_rotation(deployed)
    assert code == 1 and not events
    assert stderr.strip() == (
        "error: run clf is served: the restarted head gets it back, but it stops answering meanwhile: "
        "`rayfleet serve down` first, or --force"
    )
    assert moto.client("secretsmanager").get_secret_value(SecretId=arn)["VersionId"] == before
