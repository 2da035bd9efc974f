"""make rotate-ray-token on a real moto_server: a new secret version, the head replaced before the workers
are restarted, jobs protected, the token never printed.

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

from tests.integration import aws_stack as stack

pytestmark = pytest.mark.integration
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def deployed(moto, tmp_path):
    outputs = stack.create(moto, tmp_path)
    env = {**os.environ, "AWS_ENDPOINT_URL": moto.url, "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": stack.REGION,
           "RAYFLEET_OUTPUTS": outputs["outputs_file"], "PYTHONUNBUFFERED": "1"}  # fmt: skip
    env.pop("AWS_PROFILE", None)
    return {"moto": moto, "outputs": outputs, "env": env}


def service_tasks(ecs, service: str) -> list[dict]:
    arns = ecs.list_tasks(cluster=stack.CLUSTER, desiredStatus="RUNNING")["taskArns"]
    tasks = ecs.describe_tasks(cluster=stack.CLUSTER, tasks=arns)["tasks"] if arns else []
    return [t for t in tasks if t.get("group") == f"service:{service}"]


def replace_tasks(moto, service: str, delay: float, events: list) -> None:
    ecs = moto.client("ecs")
    time.sleep(delay)
    old = service_tasks(ecs, service)
    for task in old:
        ecs.stop_task(cluster=stack.CLUSTER, task=task["taskArn"], reason="new deployment")
    definition = old[0]["taskDefinitionArn"]
    subnets = moto.client("ec2").describe_subnets()["Subnets"]
    network = {"awsvpcConfiguration": {"subnets": [subnets[-1]["SubnetId"]], "securityGroups": [],
                                       "assignPublicIp": "DISABLED"}}  # fmt: skip
    sg = moto.client("ec2").describe_security_groups(GroupNames=["rf-tasks"])["SecurityGroups"][0]["GroupId"]
    network["awsvpcConfiguration"]["securityGroups"] = [sg]
    started = ecs.run_task(cluster=stack.CLUSTER, taskDefinition=definition, count=len(old),
                           group=f"service:{service}", startedBy="ecs-svc/1", networkConfiguration=network)  # fmt: skip
    for task in started["tasks"]:  # the manual transition leaves them PROVISIONING; ECS would get them RUNNING
        for _ in range(3):
            ecs.describe_tasks(cluster=stack.CLUSTER, tasks=[task["taskArn"]])
    events.append(("replaced", service, time.monotonic()))


def run_rotation(deployed, *args: str, delay: float = 2.0):
    """Run the verb; act as the ECS scheduler for each service it restarts."""
    moto, events = deployed["moto"], []
    proc = subprocess.Popen([sys.executable, "-m", "scripts.rotate_ray_token", "--poll", "0.5", *args], cwd=REPO,
                            env=deployed["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    threads, lines = [], []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("restarting "):
            service = line.split()[1]
            events.append(("restarting", service, time.monotonic()))
            thread = threading.Thread(target=replace_tasks, args=(moto, service, delay, events))
            thread.start()
            threads.append(thread)
    for thread in threads:
        thread.join()
    stderr = proc.stderr.read()
    return proc.wait(timeout=60), "".join(lines), stderr, events


def test_rotation_writes_a_new_version_and_restarts_head_then_workers(deployed):
    sm, ecs = deployed["moto"].client("secretsmanager"), deployed["moto"].client("ecs")
    arn = deployed["outputs"]["ray_token_secret_arn"]
    before = sm.get_secret_value(SecretId=arn)
    # moto moves tasks on describe; make the initial service tasks RUNNING as ECS would have
    for service in ("rf-test-head", "rf-test-worker"):
        for task in service_tasks(ecs, service):
            for _ in range(3):
                ecs.describe_tasks(cluster=stack.CLUSTER, tasks=[task["taskArn"]])
    old_head = {t["taskArn"] for t in service_tasks(ecs, "rf-test-head")}
    code, stdout, stderr, events = run_rotation(deployed)
    assert code == 0, stderr
    after = sm.get_secret_value(SecretId=arn)
    assert after["VersionId"] != before["VersionId"] and after["SecretString"] != before["SecretString"]
    assert len(after["SecretString"]) == 64
    assert after["SecretString"] not in stdout + stderr and before["SecretString"] not in stdout + stderr
    order = [(kind, service) for kind, service, _ in events]
    assert order == [("restarting", "rf-test-head"), ("replaced", "rf-test-head"),
                     ("restarting", "rf-test-worker"), ("replaced", "rf-test-worker")]  # fmt: skip
    head_replaced = events[1][2]
    workers_restarting = events[2][2]
    assert workers_restarting >= head_replaced  # the workers wait for the new head
    assert not old_head & {t["taskArn"] for t in service_tasks(ecs, "rf-test-head")}
    assert len(service_tasks(ecs, "rf-test-worker")) == 2


def test_rotation_refuses_while_a_job_runs(deployed):
    moto = deployed["moto"]
    ecs = moto.client("ecs")
    subnets = [s["SubnetId"] for s in moto.client("ec2").describe_subnets()["Subnets"]][-1:]
    sg = moto.client("ec2").describe_security_groups(GroupNames=["rf-tasks"])["SecurityGroups"][0]["GroupId"]
    ecs.run_task(cluster=stack.CLUSTER, taskDefinition=deployed["outputs"]["trainer_task_definition"],
                 startedBy="rayfleet", networkConfiguration={"awsvpcConfiguration": {
                     "subnets": subnets, "securityGroups": [sg]}})  # fmt: skip
    arn = deployed["outputs"]["ray_token_secret_arn"]
    before = moto.client("secretsmanager").get_secret_value(SecretId=arn)["VersionId"]
    code, _, stderr, events = run_rotation(deployed)
    assert code == 1
    assert stderr.strip() == "error: 1 job(s) running would lose the cluster: wait, `make stop`, or --force"
    assert not events
    assert moto.client("secretsmanager").get_secret_value(SecretId=arn)["VersionId"] == before
