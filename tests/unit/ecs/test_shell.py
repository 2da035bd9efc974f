"""`make exec`: which task and container each target means, the exact `aws ecs execute-command` argv, and the
one-line errors given before the CLI runs (no CLI, no plugin, bad target, no task, ECS Exec agent not up).

ECS is a botocore Stubber on a real client (requests checked against the ECS model); the CLI and the plugin
are files on a temporary PATH. tests/integration/test_ecs_exec.py runs the real CLI against moto.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from rayfleet.core.aws import Aws, PluginMissing, run_cli
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.ecs import shell
from rayfleet.ecs.outputs import Outputs

REPO = Path(__file__).resolve().parents[3]
REGION = "eu-west-1"
OUTPUTS = {
    "region": REGION,
    "cluster_name": "rf",
    "private_subnet_ids": ["subnet-1"],
    "task_security_group_id": "sg-1",
    "trainer_task_definition": "rf-trainer:1",
    "head_service_name": "rf-head",
    "worker_service_name": "rf-worker",
    "results_bucket": "rf-results",
    "trainer_log_group": "/rayfleet/rf/trainer",
}
OUT = Outputs.from_flat(**OUTPUTS)


def task(name: str, container: str, minute: int, *, group: str = "", started_by: str = "", **overrides) -> dict:
    """A RUNNING task as DescribeTasks shows it with ECS Exec on."""
    described = {
        "taskArn": f"arn:aws:ecs:{REGION}:123456789012:task/rf/{name}",
        "lastStatus": "RUNNING",
        "enableExecuteCommand": True,
        "startedAt": datetime(2026, 1, 1, 12, minute, tzinfo=UTC),
        "containers": [
            {"name": container, "managedAgents": [{"name": "ExecuteCommandAgent", "lastStatus": "RUNNING"}]}
        ],
    }
    if group:
        described["group"] = group
    if started_by:
        described["startedBy"] = started_by
    return {**described, **overrides}


HEAD = task("head1", "ray-head", 0, group="service:rf-head")
WORKER_OLD = task("workerA", "ray-worker", 1, group="service:rf-worker")
WORKER_NEW = task("workerB", "ray-worker", 2, group="service:rf-worker")
TRAINER_OLD = task("trainerA", "trainer", 3, started_by="rayfleet")
TRAINER_NEW = task("trainerB", "trainer", 4, started_by="rayfleet")
CLUSTER = [TRAINER_NEW, WORKER_NEW, HEAD, TRAINER_OLD, WORKER_OLD]  # ListTasks has no order


def ecs_answering(tasks: list[dict] | None) -> tuple[object, Stubber]:
    """A real ECS client whose ListTasks + DescribeTasks answer `tasks`; None: no call is expected."""
    ecs = boto3.client("ecs", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(ecs)
    if tasks is not None:
        arns = [t["taskArn"] for t in tasks]
        stubber.add_response("list_tasks", {"taskArns": arns}, {"cluster": "rf", "desiredStatus": "RUNNING"})
        if arns:
            stubber.add_response("describe_tasks", {"tasks": tasks, "failures": []}, {"cluster": "rf", "tasks": arns})
    stubber.activate()
    return ecs, stubber


def aws_with(monkeypatch, tasks: list[dict] | None) -> tuple[Aws, Stubber]:
    ecs, stubber = ecs_answering(tasks)
    aws = Aws(REGION)
    monkeypatch.setattr(aws, "client", lambda service, endpoint_url=None: ecs)
    return aws, stubber


def executable(path: Path, body: str = "exit 0") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def tools(tmp_path, monkeypatch) -> Path:
    """This environment's scripts directory holds `aws`; PATH holds the plugin and nothing else."""
    cli = executable(tmp_path / "venv-bin" / "aws")
    executable(tmp_path / "path" / "session-manager-plugin")
    monkeypatch.setattr(shell, "SCRIPTS_DIR", str(cli.parent))
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    return cli


@pytest.mark.parametrize(
    ("target", "described", "container"),
    [
        ("head", HEAD, "ray-head"),
        ("worker-1", WORKER_OLD, "ray-worker"),  # oldest first
        ("worker-2", WORKER_NEW, "ray-worker"),
        ("trainer", TRAINER_NEW, "trainer"),  # the newest run
    ],
)
def test_each_target_becomes_one_execute_command_argv(monkeypatch, tools, target, described, container):
    aws, stubber = aws_with(monkeypatch, CLUSTER)
    argv = shell.command_line(aws, OUT, target, "nvidia-smi -L")
    assert argv == [
        str(tools),
        "ecs",
        "execute-command",
        "--region",
        REGION,
        "--cluster",
        "rf",
        "--task",
        described["taskArn"],
        "--container",
        container,
        "--interactive",
        "--command",
        "nvidia-smi -L",
    ]
    stubber.assert_no_pending_responses()


def test_main_execs_the_cli_with_a_shell_by_default(monkeypatch, tools, tmp_path):
    (tmp_path / "o.json").write_text(json.dumps(OUTPUTS))
    aws, _ = aws_with(monkeypatch, CLUSTER)
    monkeypatch.setattr(shell, "Aws", lambda region: aws if region == REGION else None)
    calls = []

    class Execd(Exception):
        pass

    def fake_execv(path, argv):
        calls.append((path, argv))
        raise Execd  # os.execv does not return

    monkeypatch.setattr(shell.os, "execv", fake_execv)
    with pytest.raises(Execd):
        shell.open_shell("worker-2", outputs=str(tmp_path / "o.json"))
    [(path, argv)] = calls
    assert path == argv[0] == str(tools)
    assert argv[-4:] == ["ray-worker", "--interactive", "--command", "/bin/bash"]
    assert argv[argv.index("--task") + 1] == WORKER_NEW["taskArn"]


def test_the_cli_of_this_environment_comes_before_the_one_on_path(monkeypatch, tools, tmp_path):
    on_path = executable(tmp_path / "path" / "aws")
    assert shell.find_cli() == str(tools)
    monkeypatch.setattr(shell, "SCRIPTS_DIR", str(tmp_path / "nothing-here"))
    assert shell.find_cli() == str(on_path)


@pytest.mark.parametrize("target", ["gpu-node", "worker-0", "worker", "worker-x", "head-1", "Trainer", ""])
def test_a_bad_target_is_refused_before_any_aws_call(monkeypatch, tools, target):
    aws, stubber = aws_with(monkeypatch, None)  # any ECS call would raise
    with pytest.raises(ConfigError, match=r"use head, trainer or worker-N \(N from 1\)"):
        shell.command_line(aws, OUT, target, "sh")
    stubber.assert_no_pending_responses()


def test_a_bad_target_exits_2_with_one_line(monkeypatch, tools, tmp_path, capsys):
    (tmp_path / "o.json").write_text(json.dumps(OUTPUTS))
    monkeypatch.setattr(shell, "Aws", lambda region: aws_with(monkeypatch, None)[0])  # no ECS call expected
    assert run_cli(lambda _argv: shell.open_shell("gpu-node", outputs=str(tmp_path / "o.json"))) == 2
    assert capsys.readouterr().err == "error: --node 'gpu-node': use head, trainer or worker-N (N from 1)\n"


def test_a_worker_past_the_running_ones_and_a_role_with_no_task(monkeypatch, tools):
    aws, _ = aws_with(monkeypatch, CLUSTER)
    with pytest.raises(RayfleetError, match=r"^worker-7: only 2 worker task\(s\) are running \(rayfleet status\)$"):
        shell.command_line(aws, OUT, "worker-7", "sh")
    aws, _ = aws_with(monkeypatch, [HEAD, WORKER_OLD])
    with pytest.raises(RayfleetError, match=r"^no running trainer task in rf \(rayfleet status\)$"):
        shell.command_line(aws, OUT, "trainer", "sh")
    aws, _ = aws_with(monkeypatch, [])
    with pytest.raises(RayfleetError, match=r"^no running head task in rf"):
        shell.command_line(aws, OUT, "head", "sh")


def _agent(status: str | None, reason: str = "") -> list[dict]:
    agent = {"name": "ExecuteCommandAgent", **({"lastStatus": status} if status else {})}
    if reason:
        agent["reason"] = reason
    return [{"name": "ray-head", "managedAgents": [agent] if status else []}]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"lastStatus": "PENDING"}, "task head1 is PENDING, not RUNNING"),
        ({"enableExecuteCommand": False}, "task head1 was started without ECS Exec (enableExecuteCommand)"),
        ({"containers": _agent("PENDING")}, "the ECS Exec agent in ray-head of task head1 is PENDING, not RUNNING"),
        ({"containers": _agent(None)}, "the ECS Exec agent in ray-head of task head1 is not reported, not RUNNING"),
        ({"containers": _agent("STOPPED", "agent\nexited")}, "is STOPPED (agent exited), not RUNNING"),
        ({"containers": [{"name": "sidecar"}]}, "task head1 has no container ray-head"),
    ],
)
def test_a_task_whose_ecs_exec_agent_is_not_running(monkeypatch, tools, overrides, message):
    aws, _ = aws_with(monkeypatch, [{**HEAD, **overrides}])
    with pytest.raises(shell.ExecUnavailable) as err:
        shell.command_line(aws, OUT, "head", "sh")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_no_aws_cli_is_one_line(monkeypatch, tmp_path, capsys):
    (tmp_path / "o.json").write_text(json.dumps(OUTPUTS))
    monkeypatch.setattr(shell, "SCRIPTS_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(shell, "Aws", lambda region: aws_with(monkeypatch, None)[0])  # no ECS call expected
    assert run_cli(lambda _argv: shell.open_shell(outputs=str(tmp_path / "o.json"))) == 1
    assert (
        capsys.readouterr().err == "error: the AWS CLI (`aws`) is not installed: `make setup` installs it into .venv\n"
    )


def test_no_plugin_is_one_line_from_the_real_entry_point(tmp_path):
    """The verb as `make exec` runs it, with a PATH that holds an `aws` but no plugin, and an endpoint
    nothing answers on: the plugin is checked before any AWS call and before the CLI runs."""
    (tmp_path / "o.json").write_text(json.dumps(OUTPUTS))
    ran = tmp_path / "aws-ran"
    executable(tmp_path / "bin" / "aws", f"touch {ran}")
    env = {
        "PATH": str(tmp_path / "bin"),
        "HOME": str(tmp_path),
        "AWS_ACCESS_KEY_ID": "x",
        "AWS_SECRET_ACCESS_KEY": "x",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayfleet.cli.main",
            "exec",
            "--outputs",
            str(tmp_path / "o.json"),
            "--node",
            "worker-1",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: the Session Manager plugin is not installed (session-manager-plugin")
    assert shell.PLUGIN_DOC in result.stderr
    assert not ran.exists()


def test_the_plugin_is_looked_up_on_path_only_as_the_cli_does(monkeypatch, tools, tmp_path):
    executable(tools.parent / "session-manager-plugin")  # beside this environment's `aws`: the CLI would miss it
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(PluginMissing, match=shell.PLUGIN_DOC):
        shell.check_plugin()
    monkeypatch.setenv("PATH", str(tools.parent))
    shell.check_plugin()
