"""The AWS verbs end to end, as real processes against a real moto_server holding a deployed stack."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.integration.conftest import REPO, run_verb

pytestmark = pytest.mark.integration


def _task(stack, arn):
    return stack["server"].client("ecs").describe_tasks(cluster="rf-test", tasks=[arn])["tasks"][0]


def test_launch_detached_sets_overrides_network_and_records_the_run(aws_stack):
    result = run_verb(aws_stack["env"], "launch", "ddp", "epochs=1", "--run-name", "detached-1", "--detach")
    assert result.returncode == 0, result.stderr
    assert "run detached-1: task arn:aws:ecs:" in result.stdout
    assert "s3://rf-test-results/runs/detached-1/" in result.stdout and "make logs RUN=detached-1" in result.stdout
    s3 = aws_stack["server"].client("s3")
    record = json.loads(s3.get_object(Bucket="rf-test-results", Key="runs/detached-1/launch.json")["Body"].read())
    task = _task(aws_stack, record["task_arn"])
    override = task["overrides"]["containerOverrides"][0]
    assert override["name"] == "trainer"
    assert override["command"] == ["ddp", "storage=s3://rf-test-results/runs", "run_name=detached-1", "epochs=1"]
    assert {"name": "RAYFLEET_RUN_NAME", "value": "detached-1"} in override["environment"]
    assert (
        task["startedBy"] == "rayfleet" and task["taskDefinitionArn"] == aws_stack["outputs"]["trainer_task_definition"]
    )
    details = {d["name"]: d["value"] for d in task["attachments"][0]["details"]}
    assert details["subnetId"] == aws_stack["outputs"]["private_subnet_ids"][0]
    eni = (
        aws_stack["server"]
        .client("ec2")
        .describe_network_interfaces(NetworkInterfaceIds=[details["networkInterfaceId"]])
    )
    groups = [g["GroupId"] for g in eni["NetworkInterfaces"][0]["Groups"]]
    assert groups == [aws_stack["outputs"]["task_security_group_id"]]
    assert record["log_stream"] == f"trainer/trainer/{record['task_arn'].rsplit('/', 1)[-1]}"


def test_launch_follows_the_driver_log_until_the_task_stops(aws_stack):
    env = aws_stack["env"]
    proc = subprocess.Popen([sys.executable, "-m", "scripts.launch", "ddp", "--run-name", "followed-1"], env=env,
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    server = aws_stack["server"]
    s3, logs, ecs = server.client("s3"), server.client("logs"), server.client("ecs")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                record = json.loads(
                    s3.get_object(Bucket="rf-test-results", Key="runs/followed-1/launch.json")["Body"].read()
                )
                break
            except s3.exceptions.NoSuchKey:
                assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()[1]
                time.sleep(0.2)
        logs.create_log_stream(logGroupName=record["log_group"], logStreamName=record["log_stream"])
        now = int(time.time() * 1000)
        lines = [f"epoch {i}/3  train_loss {1 / i:.4f}" for i in (1, 2, 3)]
        logs.put_log_events(logGroupName=record["log_group"], logStreamName=record["log_stream"],
                            logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(lines)])  # fmt: skip
        time.sleep(3)  # at least one poll sees the task running
        ecs.stop_task(cluster="rf-test", task=record["task_arn"], reason="job finished")
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err  # moto reports exit code 0 for a stopped task
    assert "[rayfleet] trainer task is RUNNING" in err and "[rayfleet] trainer task is STOPPED" in err
    positions = [out.index(line) for line in lines]
    assert positions == sorted(positions) and all(out.count(line) == 1 for line in lines)

    # The logs verb prints the same events in order; --since in the future prints none.
    printed = run_verb(env, "logs", "followed-1")
    assert printed.returncode == 0 and printed.stdout.splitlines() == lines
    assert run_verb(env, "logs", "followed-1", "--since", "2099-01-01T00:00").stdout == ""
    assert run_verb(env, "logs", "followed-1", "--since", "10m").stdout.splitlines() == lines


def test_status_reports_services_tasks_runs_ray_and_cost(aws_stack, cluster_env):
    env = aws_stack["env"]
    # The head's snapshot writer, against a real local Ray cluster, into the stack's bucket.
    snap_env = {**cluster_env, **{k: v for k, v in env.items() if k.startswith(("AWS_", "RAYFLEET_OUTPUTS"))}}
    snapshot = subprocess.run([sys.executable, "-m", "scripts.head_snapshot", "--bucket", "rf-test-results", "--once",
                               "--address", cluster_env["RAY_ADDRESS"]], env=snap_env, cwd=REPO,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    assert snapshot.returncode == 0, snapshot.stderr[-2000:]
    launched = run_verb(env, "launch", "ddp", "--run-name", "status-1", "--detach", "--json")
    assert launched.returncode == 0, launched.stderr
    s3, ecs = aws_stack["server"].client("s3"), aws_stack["server"].client("ecs")
    for step in ("000001", "000002"):
        s3.put_object(Bucket="rf-test-results", Key=f"runs/status-1/checkpoint_{step}/state.pt", Body=b"x")
    ecs.stop_task(cluster="rf-test", task=json.loads(launched.stdout)["task_arn"], reason="done")
    result = run_verb(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    services = {s["name"]: s for s in status["services"]}
    assert services["rf-test-head"]["desired"] == 1 and services["rf-test-worker"]["desired"] == 2
    assert sorted(i["instance_type"] for i in status["instances"]) == ["g5.xlarge", "g5.xlarge", "m5.xlarge"]
    assert sum(i["gpus"] for i in status["instances"]) == 2
    assert status["cost_per_hour_usd"] == pytest.approx(1.006 * 2 + 0.192)
    roles = [t["role"] for t in status["tasks"]]
    assert roles.count("head") == 1 and roles.count("worker") == 2
    assert all(t["instance_type"] in ("g5.xlarge", "m5.xlarge") for t in status["tasks"])
    runs = {r["run"]: r for r in status["runs"]}
    assert runs["status-1"]["state"] == "SUCCEEDED"  # stopped with exit code 0
    assert runs["status-1"]["last_checkpoint"] == "checkpoint_000002"
    assert runs["status-1"]["results"] == "s3://rf-test-results/runs/status-1/"
    assert status["ray"]["total"]["CPU"] == 2.0 and len(status["ray"]["nodes"]) == 3
    human = run_verb(env, "status")
    assert "rf-test-head" in human.stdout and "3 nodes alive; CPU" in human.stdout and "$2.20/hour" in human.stdout


def test_teardown_scales_to_zero_stops_trainers_and_is_idempotent(aws_stack):
    env = aws_stack["env"]
    assert run_verb(env, "launch", "ddp", "--run-name", "doomed-1", "--detach").returncode == 0
    first = run_verb(env, "teardown")
    assert first.returncode == 0, first.stderr
    assert "nothing left running" in first.stdout
    ecs = aws_stack["server"].client("ecs")
    services = ecs.describe_services(cluster="rf-test", services=["rf-test-head", "rf-test-worker"])["services"]
    assert [s["desiredCount"] for s in services] == [0, 0]
    assert ecs.list_tasks(cluster="rf-test", startedBy="rayfleet", desiredStatus="RUNNING")["taskArns"] == []
    second = run_verb(env, "teardown", "--json")
    assert second.returncode == 0 and json.loads(second.stdout)["trainer_tasks_stopped"] == []
    for service in ("rf-test-head", "rf-test-worker"):  # leave the stack as the other tests expect it
        ecs.update_service(cluster="rf-test", service=service, desiredCount=1 if service.endswith("head") else 2)


def test_make_targets_drive_the_same_verbs(aws_stack):
    def make(*args):
        return subprocess.run(["make", "-s", *args], env=aws_stack["env"], cwd=REPO, capture_output=True,
                              text=True, timeout=180)  # fmt: skip

    launched = make("launch", "JOB=ddp", "ARGS=--detach --run-name via-make epochs=2")
    assert launched.returncode == 0, launched.stderr
    assert "run via-make: task arn:aws:ecs:" in launched.stdout
    status = make("status", "ARGS=--json")
    assert status.returncode == 0 and "via-make" in {r["run"] for r in json.loads(status.stdout)["runs"]}
    missing_run = make("logs")
    assert missing_run.returncode != 0 and "make logs RUN=" in missing_run.stderr
