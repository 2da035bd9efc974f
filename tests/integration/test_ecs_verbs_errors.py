"""Every error path of the AWS verbs: one line saying what is wrong and what to run, exit 1, no traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from rayfleet.core.aws import Aws, PlacementFailed, PluginMissing, translate
from rayfleet.ecs.launch import launch
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.shell import exec_in, find_task
from tests.integration.helpers import run_verb

pytestmark = pytest.mark.integration


def one_clear_line(result, *expected: str) -> None:
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for text in expected:
        assert text in lines[0], lines[0]


@pytest.mark.parametrize("verb", ["launch", "status", "logs", "deploy stop", "exec"])
def test_missing_outputs(aws_stack, tmp_path, verb):
    env = {**aws_stack["env"], "RAYFLEET_OUTPUTS": str(tmp_path / "none.json")}
    args = {"launch": ["ddp"], "logs": ["--run", "some-run"]}.get(verb, [])
    one_clear_line(run_verb(env, *verb.split(), *args), "Terraform outputs", "run `rayfleet deploy`")


def test_broken_outputs_file(aws_stack, tmp_path):
    (tmp_path / "o.json").write_text("{not json")
    one_clear_line(run_verb(aws_stack["env"], "status", "--outputs", str(tmp_path / "o.json")), "is not JSON")


def test_missing_credentials(aws_stack, tmp_path):
    env = {k: v for k, v in aws_stack["env"].items() if not k.startswith(("AWS_ACCESS", "AWS_SECRET", "AWS_SESSION"))}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    one_clear_line(run_verb(env, "status"), "no AWS credentials found", "aws sso login")


def test_cluster_that_does_not_exist(aws_stack, tmp_path):
    outputs = json.loads(Path(aws_stack["outputs"]["outputs_file"]).read_text())
    outputs["cluster_name"]["value"] = "rf-gone"
    (tmp_path / "o.json").write_text(json.dumps(outputs))
    for verb, args in ((["status"], []), (["launch"], ["ddp", "--detach"]), (["deploy", "stop"], [])):
        one_clear_line(
            run_verb(aws_stack["env"], *verb, "--outputs", str(tmp_path / "o.json"), *args),
            "ECS cluster rf-gone does not exist",
            "rayfleet deploy",
        )


def test_placement_failure_says_which_reason_ecs_gave(aws_stack, monkeypatch):
    """moto answers RunTask on a cluster without capacity with a 500, so RunTask alone is stubbed, with the
    response shape ECS gives when nothing can be placed; the cluster check around it is real."""
    aws, out = _aws(aws_stack, monkeypatch)
    ecs = aws.session.client("ecs")
    aws._clients["ecs"] = ecs
    with Stubber(ecs) as stubber:
        stubber.add_response("describe_clusters", {"clusters": [{"clusterName": out.cluster_name, "status": "ACTIVE"}]})
        stubber.add_response(
            "run_task", {"tasks": [], "failures": [{"arn": "arn:aws:ecs:x", "reason": "RESOURCE:GPU"}]}
        )
        with pytest.raises(PlacementFailed) as err:
            launch(aws, out, "ddp", [])
        stubber.add_response("describe_clusters", {"clusters": [{"clusterName": out.cluster_name, "status": "ACTIVE"}]})
        stubber.add_response("run_task", {"tasks": [], "failures": []})
        with pytest.raises(PlacementFailed) as silent:
            launch(aws, out, "ddp", [])
        stubber.add_response("describe_clusters", {"clusters": [{"clusterName": out.cluster_name, "status": "ACTIVE"}]})
        stubber.add_response(  # every driver share of the head instance is taken
            "run_task", {"tasks": [], "failures": [{"arn": "arn:aws:ecs:x", "reason": "RESOURCE:MEMORY"}]}
        )
        with pytest.raises(PlacementFailed) as full:
            launch(aws, out, "ddp", [])
    assert "RESOURCE:GPU: no registered container instance has a free GPU" in str(err.value)
    assert "rayfleet status" in str(err.value) and "no container instances registered" in str(silent.value)
    assert "holds 1 run driver(s) at once, Terraform's concurrent_runs" in str(full.value)
    assert full.value.slots_full and not err.value.slots_full  # only a full head instance makes a run wait
    assert full.value.request["overrides"]["containerOverrides"][0]["command"][0] == "ddp"  # kept to send again
    assert "\n" not in str(full.value)


def test_aws_errors_become_one_line(aws_stack):
    expired = ClientError({"Error": {"Code": "ExpiredTokenException", "Message": "expired"}}, "ListTasks")
    html = ClientError({"Error": {"Code": "500", "Message": "<!doctype html>\n<html>\n<h1>oops</h1>"}}, "RunTask")
    assert "aws sso login" in str(translate(expired))
    assert str(translate(html)) == "RunTask failed: 500: the endpoint answered with an HTML error page"


def test_logs_of_an_unknown_run_and_a_bad_since(aws_stack):
    one_clear_line(run_verb(aws_stack["env"], "logs", "--run", "never-ran"), "no run never-ran", "rayfleet runs")
    assert run_verb(aws_stack["env"], "launch", "ddp", "--name", "since-1", "--detach").returncode == 0
    one_clear_line(
        run_verb(aws_stack["env"], "logs", "--run", "since-1", "--since", "yesterday"), "--since 'yesterday'"
    )


def _aws(stack, monkeypatch) -> tuple[Aws, Outputs]:
    for key, value in stack["env"].items():
        if key.startswith(("AWS_", "RAYFLEET_OUTPUTS")):
            monkeypatch.setenv(key, value)
    return Aws("us-east-1"), Outputs.load()


def test_exec_needs_the_session_manager_plugin(aws_stack, monkeypatch, tmp_path):
    aws, out = _aws(aws_stack, monkeypatch)
    monkeypatch.setenv("PATH", str(tmp_path))  # no plugin anywhere
    with pytest.raises(PluginMissing, match="session-manager-plugin"):
        exec_in(aws, out, "head", "ray status")
    env = {**aws_stack["env"], "PATH": str(tmp_path)}
    one_clear_line(run_verb(env, "exec", "--command", "ray status"), "Session Manager plugin is not installed")


def test_exec_target_errors(aws_stack, monkeypatch):
    aws, out = _aws(aws_stack, monkeypatch)
    with pytest.raises(Exception, match="use head, trainer or worker-N"):
        find_task(aws, out, "gpu-node")
    with pytest.raises(Exception, match="only 2 worker task"):
        find_task(aws, out, "worker-3")
    assert find_task(aws, out, "worker-2")[1] == "ray-worker"
