"""Runs beyond the head instance's driver slots wait for one instead of failing, against moto_server with the
stack Terraform renders: `make run` keeps the RunTask (cluster/launches/), `make queue` lists it, the control
task's dispatch (rayfleet/node/driver_dispatch.py) sends it again with moto's real RunTask and the trainer
starts, `make logs` finds that trainer, and `make cancel` takes a waiting one out.

moto never refuses RunTask for want of memory with a reason (with no room it places nothing and says
nothing), so the submitter's RunTask alone answers as ECS does when every driver share of the head instance
is taken: RESOURCE:MEMORY. Everything else is moto's.
"""

from __future__ import annotations

import json

import pytest
import yaml

from rayfleet.core.aws import Aws
from rayfleet.core.launch_queue import Launches
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.ecs.logs import run_record
from rayfleet.ecs.outputs import Outputs
from rayfleet.node.driver_dispatch import DriverDispatch

pytestmark = pytest.mark.integration
FULL = {
    "tasks": [],
    "failures": [{"arn": "arn:aws:ecs:us-east-1:123456789012:container-instance/x", "reason": "RESOURCE:MEMORY"}],
}


class SlotsTaken:
    """The submitter's ECS client, whose RunTask finds every driver share taken (the rest is moto's)."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        return getattr(self.client, name)

    def run_task(self, **kwargs):
        return FULL


@pytest.fixture
def submitter(aws_stack, monkeypatch):
    """The verbs' environment, in this process, with every driver slot taken."""
    for key, value in aws_stack["env"].items():
        monkeypatch.setenv(key, value)
    real = Aws.client

    def client(self, name, **kwargs):
        made = real(self, name, **kwargs)
        return SlotsTaken(made) if name == "ecs" else made

    monkeypatch.setattr(Aws, "client", client)
    return Outputs.load(aws_stack["outputs"]["outputs_file"])


def recipe(tmp_path, priority: int) -> str:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('hello')\n")
    path = tmp_path / f"recipe-{priority}.yaml"
    spec = {"name": "slot", "code": "code", "entrypoint": "train.py", "priority": priority}
    path.write_text(yaml.safe_dump(spec | {"resources": {"workers": 1, "cpus_per_worker": 1}}))
    return str(path)


def test_runs_past_the_driver_slots_wait_in_order_start_when_the_control_task_finds_one_and_can_be_cancelled(
    submitter, aws_stack, tmp_path, capsys
):
    from rayfleet.cli.main import main as cli
    from rayfleet.ops import queued
    from rayfleet.targets.run import main as run

    out = submitter
    assert run([recipe(tmp_path, 0), "--target", "ecs", "--run-name", "slot-low", "--detach"]) == 0
    said = capsys.readouterr().out
    assert "driver slot(s) are taken; queued (position 1)" in said and "make cancel RUN=slot-low" in said
    assert run([recipe(tmp_path, 5), "--target", "ecs", "--run-name", "slot-high", "--detach"]) == 0
    assert "queued (position 1)" in capsys.readouterr().out  # the higher priority goes first
    launches = Launches.of_bucket(out.results_bucket)
    assert [p.run for p in launches.waiting()] == ["slot-high", "slot-low"]
    kept = launches.get("slot-high").request
    assert kept["cluster"] == out.cluster_name and kept["overrides"]["containerOverrides"][0]["command"] == ["recipe"]
    record = RunDir(runs_root(out.results_bucket), "slot-low").record()
    assert record["state"] == "QUEUED" and record["message"] == "waiting for a driver slot"

    assert queued.main(["--json"]) == 0
    shown = [r for r in json.loads(capsys.readouterr().out) if r["where"] == "ecs"]
    assert [(r["run"], r["state"], r["position"]) for r in shown] == [
        ("slot-high", "no-slot", 1),
        ("slot-low", "no-slot", 2),
    ]
    assert shown[0]["resources"] == "1 x 1 CPU" and "RESOURCE:MEMORY" in shown[0]["reason"]
    with pytest.raises(Exception, match="waits for a driver slot"):
        run_record(out, "slot-high")

    # The control task's round, with moto's own RunTask: the first in line is placed, and only it.
    ecs = aws_stack["server"].client("ecs")
    lines: list[str] = []
    done = DriverDispatch(launches, ecs, out.cluster_name, say=lines.append).tick()
    assert done["first"] == "slot-high" and done["waiting"] == 1 and done["started"].startswith("arn:aws:ecs:")
    started = launches.get("slot-high")
    assert started.task_arn == done["started"] and "slot-high's trainer placed" in lines[0]
    task = ecs.describe_tasks(cluster=out.cluster_name, tasks=[started.task_arn])["tasks"][0]
    assert (
        task["taskDefinitionArn"]
        .split("/")[-1]
        .startswith(f"{out.trainer_task_definition.split('/')[-1].split(':')[0]}:")
    )
    env = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    assert env["RAYFLEET_RUN_NAME"] == "slot-high" and json.loads(env["RAYFLEET_RECIPE"])["priority"] == 5
    assert run_record(out, "slot-high")["task_arn"] == started.task_arn  # `make logs` finds its trainer
    assert [p.run for p in launches.waiting()] == ["slot-low"]

    assert cli(["cancel", "--run", "slot-low"]) == 0
    assert "waited for a driver slot and never started" in capsys.readouterr().out
    assert launches.get("slot-low") is None
    assert RunDir(runs_root(out.results_bucket), "slot-low").record()["state"] == "CANCELLED"
    assert DriverDispatch(launches, ecs, out.cluster_name).tick() is None  # nothing waits any more
