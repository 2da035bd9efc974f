"""The AWS verbs end to end, as real processes against a real moto_server holding a deployed stack."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, Lines, run_record, run_verb

pytestmark = pytest.mark.integration


def _task(stack, arn):
    cluster = stack["outputs"]["cluster_name"]
    return stack["server"].client("ecs").describe_tasks(cluster=cluster, tasks=[arn])["tasks"][0]


def test_launch_detached_sets_overrides_network_and_records_the_run(aws_stack):
    bucket = aws_stack["outputs"]["results_bucket"]
    result = run_verb(aws_stack["env"], "launch", "ddp", "epochs=1", "--name", "detached-1", "--detach")
    assert result.returncode == 0, result.stderr
    assert "run detached-1: task arn:aws:ecs:" in result.stdout
    assert f"s3://{bucket}/runs/detached-1/" in result.stdout and "rayfleet logs --run detached-1" in result.stdout
    s3 = aws_stack["server"].client("s3")
    record = run_record(aws_stack["env"], bucket, "detached-1")
    task = _task(aws_stack, record["task_arn"])
    override = task["overrides"]["containerOverrides"][0]
    assert override["name"] == "trainer"
    assert override["command"] == ["ddp", f"storage=s3://{bucket}/runs", "run_name=detached-1", "epochs=1"]
    assert {"name": "RAYFLEET_RUN_NAME", "value": "detached-1"} in override["environment"]
    # Terraform's output names the trainer's task definition as family:revision (rayfleet-trainer:1), not an ARN
    trainer = (
        aws_stack["server"]
        .client("ecs")
        .describe_task_definition(taskDefinition=aws_stack["outputs"]["trainer_task_definition"])["taskDefinition"]
    )
    assert task["startedBy"] == "rayfleet" and task["taskDefinitionArn"] == trainer["taskDefinitionArn"]
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
    # The one run record: a launched job starts SUBMITTED on target ecs. The submitter owns no run.json (the
    # job's follower does): it sent one event, and nothing else is written beside it.
    assert (record["state"], record["target"], record["job"]) == ("SUBMITTED", "ecs", "ddp")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="runs/detached-1/")["Contents"]]
    assert len(keys) == 1 and re.fullmatch(r"runs/detached-1/events/\d{20}-.+-launched\.json", keys[0]), keys


def test_launch_follows_the_driver_log_until_the_task_stops(aws_stack):
    env = aws_stack["env"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.cli.main", "launch", "ddp", "--name", "followed-1"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    output, progress = Lines(proc.stdout), Lines(proc.stderr)
    server = aws_stack["server"]
    logs, ecs = server.client("logs"), server.client("ecs")
    bucket, cluster = aws_stack["outputs"]["results_bucket"], aws_stack["outputs"]["cluster_name"]
    try:
        deadline = time.monotonic() + 60
        while True:
            record = run_record(aws_stack["env"], bucket, "followed-1")
            if record:
                break
            assert time.monotonic() < deadline and proc.poll() is None, "".join(progress.lines)
            time.sleep(0.2)
        logs.create_log_stream(logGroupName=record["log_group"], logStreamName=record["log_stream"])
        now = int(time.time() * 1000)
        lines = [f"epoch {i}/3  train_loss {1 / i:.4f}" for i in (1, 2, 3)]
        logs.put_log_events(
            logGroupName=record["log_group"],
            logStreamName=record["log_stream"],
            logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(lines)],
        )
        progress.wait_for("[rayfleet] trainer task is RUNNING", timeout=60)  # a poll saw it running
        ecs.stop_task(cluster=cluster, task=record["task_arn"], reason="job finished")
        assert proc.wait(timeout=60) == 0, progress.text()  # moto reports exit code 0 for a stopped task
        out, err = output.text(), progress.text()
    finally:
        proc.kill()
    assert "[rayfleet] trainer task is RUNNING" in err and "[rayfleet] trainer task is STOPPED" in err
    positions = [out.index(line) for line in lines]
    assert positions == sorted(positions) and all(out.count(line) == 1 for line in lines)

    # The logs verb prints the same events in order; --since in the future prints none.
    printed = run_verb(env, "logs", "--run", "followed-1")
    assert printed.returncode == 0 and printed.stdout.splitlines() == lines
    assert run_verb(env, "logs", "--run", "followed-1", "--since", "2099-01-01T00:00").stdout == ""
    assert run_verb(env, "logs", "--run", "followed-1", "--since", "10m").stdout.splitlines() == lines


def test_status_reports_services_tasks_runs_ray_and_cost(aws_stack, cluster_env):
    env, out = aws_stack["env"], aws_stack["outputs"]
    bucket, cluster = out["results_bucket"], out["cluster_name"]
    # The head's snapshot writer, against a real local Ray cluster, into the stack's bucket.
    snap_env = {**cluster_env, **{k: v for k, v in env.items() if k.startswith(("AWS_", "RAYFLEET_OUTPUTS"))}}
    snapshot = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayfleet.node.control.head_snapshot",
            "--bucket",
            bucket,
            "--once",
            "--dashboard",
            f"http://127.0.0.1:{cluster_env['RAYFLEET_DASHBOARD_PORT']}",
        ],
        env=snap_env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert snapshot.returncode == 0, snapshot.stderr[-2000:]
    launched = run_verb(env, "launch", "ddp", "--name", "status-1", "--detach", "--json")
    assert launched.returncode == 0, launched.stderr
    s3, ecs = aws_stack["server"].client("s3"), aws_stack["server"].client("ecs")
    for step in ("000001", "000002"):
        s3.put_object(Bucket=bucket, Key=f"runs/status-1/checkpoint_{step}/state.pt", Body=b"x")
    ecs.stop_task(cluster=cluster, task=json.loads(launched.stdout)["task_arn"], reason="done")
    result = run_verb(env, "status", "--json")
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout)
    services = {s["name"]: s for s in status["services"]}
    assert (
        services[out["head_service_name"]]["desired"] == 1
        and services[out["worker_groups"]["default"]["service_name"]]["desired"] == 2
    )
    assert sorted(i["instance_type"] for i in status["instances"]) == ["g5.xlarge", "g5.xlarge", "m5.xlarge"]
    assert sum(i["gpus"] for i in status["instances"]) == 2
    assert status["cost_per_hour_usd"] == pytest.approx(1.006 * 2 + 0.192)
    # Spend since the instances started (moto launched them when the stack was created): list prices x hours.
    since = datetime.fromisoformat(status["running_since"])
    hours = (datetime.now(UTC) - since).total_seconds() / 3600
    assert 0 < status["spent_usd"] <= round((1.006 * 2 + 0.192) * hours, 2) + 0.01
    assert all(i["lifecycle"] == "on-demand" for i in status["instances"])
    roles = [t["role"] for t in status["tasks"]]
    assert roles.count("head") == 1 and roles.count("worker") == 2
    assert all(t["instance_type"] in ("g5.xlarge", "m5.xlarge") for t in status["tasks"])
    runs = {r["run"]: r for r in status["runs"]}
    assert runs["status-1"]["state"] == "SUCCEEDED"  # stopped with exit code 0
    assert runs["status-1"]["last_checkpoint"] == "checkpoint_000002"
    assert runs["status-1"]["results"] == f"s3://{bucket}/runs/status-1/"
    assert status["ray"]["total"]["CPU"] == 2.0 and len(status["ray"]["nodes"]) == 3
    assert status["ray"]["available"]["CPU"] == 2.0
    # The jobs are the Jobs API's, read over HTTP (no driver); earlier tests may have left jobs on this cluster.
    token = Path(cluster_env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster_env['RAYFLEET_DASHBOARD_PORT']}/api/jobs/",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        listed = json.load(response)
    assert sorted(j["submission_id"] or "" for j in status["ray"]["jobs"]) == sorted(
        j["submission_id"] or "" for j in listed
    )
    # The last 7 days' goodput: the two GPU instances' time since moto launched them (the head's is the
    # cluster's); the session's runs with ledgers used seconds of it (status-1's job never ran): mostly idle.
    week = status["goodput"]
    assert 0 < week["idle_usd"] <= week["usd"] <= round(1.006 * 2 * hours, 2) + 0.01
    assert 0 <= week["goodput"] < 0.5 and week["biggest_loss"]["what"] == "nodes idle between runs"
    human = run_verb(env, "status")
    assert (
        out["head_service_name"] in human.stdout
        and "3 nodes alive (1 head, 2 workers); CPU 2/2 free" in human.stdout
        and "$2.20/hour" in human.stdout
        and "biggest loss: nodes idle between runs " in human.stdout
    )


def test_teardown_scales_to_zero_stops_trainers_and_is_idempotent(aws_stack):
    env = aws_stack["env"]
    assert run_verb(env, "launch", "ddp", "--name", "doomed-1", "--detach").returncode == 0
    first = run_verb(env, "deploy", "stop")
    assert first.returncode == 0, first.stderr
    assert "nothing left running" in first.stdout
    ecs = aws_stack["server"].client("ecs")
    out = aws_stack["outputs"]
    cluster = out["cluster_name"]
    names = [out["head_service_name"], out["worker_groups"]["default"]["service_name"], out["control_service_name"]]
    services = ecs.describe_services(cluster=cluster, services=names)["services"]
    assert [s["desiredCount"] for s in services] == [0, 0, 0]  # the control task too (it holds the head's instance)
    assert ecs.list_tasks(cluster=cluster, startedBy="rayfleet", desiredStatus="RUNNING")["taskArns"] == []
    second = run_verb(env, "deploy", "stop", "--json")
    assert second.returncode == 0 and json.loads(second.stdout)["trainer_tasks_stopped"] == []
    desired = {s["serviceName"]: s["desiredCount"] for s in aws_stack["picture"]["services"]}
    for service in names:  # leave the stack as the other tests expect it: the rendered desired counts
        ecs.update_service(cluster=cluster, service=service, desiredCount=desired[service])


def test_make_targets_drive_the_same_verbs(aws_stack):
    def make(*args):
        return subprocess.run(
            ["make", "-s", *args], env=aws_stack["env"], cwd=REPO, capture_output=True, text=True, timeout=180
        )

    launched = run_verb(aws_stack["env"], "launch", "ddp", "epochs=2", "--name", "via-make", "--detach")
    assert launched.returncode == 0, launched.stderr
    assert "run via-make: task arn:aws:ecs:" in launched.stdout
    status = make("status")
    assert status.returncode == 0 and "via-make" in status.stdout
    missing_run = make("logs")  # rayfleet's one line (exit 2), which make reports as its own 2
    assert missing_run.returncode == 2 and "the following arguments are required: --run" in missing_run.stderr
