"""Runs beyond the head instance's driver slots wait for one instead of failing, against moto_server with the
stack Terraform renders at its real trainer size (one driver slot: tools/moto_stack/stack.py trainer_slots=1),
whose patched RunTask refuses a second trainer as ECS does (RESOURCE:MEMORY, tools/moto_stack/ecs.py): `make
run` keeps the RunTask (cluster/launches/), `rayfleet queue` lists it, the control task's dispatch
(rayfleet/node/control/driver_dispatch.py) sends it again, refused while the slot is taken and placed once the first
trainer stops, `make logs` finds that trainer, and `make cancel` takes a waiting one out. Every verb runs as a
process of its own, as from a laptop.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from rayfleet.core.launch_queue import Launches
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.ecs.outputs import Outputs
from rayfleet.node.control.driver_dispatch import DriverDispatch
from tests.integration.helpers import REPO, verbs_env
from tools.moto_stack import stack as moto_stack

pytestmark = pytest.mark.integration


@pytest.fixture
def one_slot(ecs_moto, tmp_path, monkeypatch):
    """A deployment of its own whose head instance holds one trainer beside the head, as Terraform sizes it;
    this process reads its bucket as the control task would."""
    (tmp_path / "aws").mkdir()
    made = moto_stack.create(ecs_moto, tmp_path / "aws", moto_stack.default_picture(), trainer_slots=1)
    env = verbs_env(ecs_moto.url, made["outputs_file"], moto_stack.REGION)
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(key, env[key])
    return {"env": env, "out": Outputs.load(made["outputs_file"]), "ecs": ecs_moto.client("ecs")}


def verb(env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=env, cwd=REPO, capture_output=True, text=True, timeout=180)


def recipe(tmp_path, priority: int) -> str:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text("print('hello')\n")
    path = tmp_path / f"recipe-{priority}.yaml"
    spec = {"name": "slot", "code": "code", "entrypoint": "train.py", "priority": priority}
    path.write_text(yaml.safe_dump(spec | {"resources": {"workers": 1, "cpus_per_worker": 1}}))
    return str(path)


def test_runs_past_the_driver_slots_wait_in_order_start_when_the_control_task_finds_one_and_can_be_cancelled(
    one_slot, tmp_path
):
    env, out, ecs = one_slot["env"], one_slot["out"], one_slot["ecs"]

    def run(priority: int, name: str) -> str:
        launched = verb(
            env,
            "-m",
            "rayfleet.cli.main",
            "run",
            recipe(tmp_path, priority),
            "--on",
            "ecs",
            "--name",
            name,
            "--detach",
        )
        assert launched.returncode == 0, launched.stdout + launched.stderr
        return launched.stdout

    assert "task arn:aws:ecs:" in run(0, "slot-first")  # the one driver slot
    said = run(0, "slot-low")
    assert "the head instance's 1 driver slot(s) are taken; queued (position 1)" in said, said
    assert "rayfleet cancel --run slot-low" in said
    assert "queued (position 1)" in run(5, "slot-high")  # the higher priority goes first
    launches = Launches.of_bucket(out.results_bucket)
    assert [p.run for p in launches.waiting()] == ["slot-high", "slot-low"]
    kept = launches.get("slot-high")
    assert kept.request["cluster"] == out.cluster_name and "RESOURCE:MEMORY" in kept.why  # moto's own refusal
    record = RunDir(runs_root(out.results_bucket), "slot-low").record()
    assert record["state"] == "QUEUED" and record["message"] == "waiting for a driver slot"

    listed = verb(env, "-m", "rayfleet.cli.main", "queue", "--json")
    shown = [r for r in json.loads(listed.stdout) if r["where"] == "ecs"]
    assert [(r["run"], r["state"], r["position"]) for r in shown] == [
        ("slot-high", "no-slot", 1),
        ("slot-low", "no-slot", 2),
    ]
    assert shown[0]["resources"] == "1 x 1 CPU" and "RESOURCE:MEMORY" in shown[0]["reason"]
    logs = verb(env, "-m", "rayfleet.cli.main", "logs", "--run", "slot-high")
    assert logs.returncode != 0 and "slot-high waits for a driver slot, so it has no log yet" in logs.stderr

    # The control task's rounds, with moto's RunTask: refused while the first trainer holds the slot ...
    lines: list[str] = []
    dispatch = DriverDispatch(launches, ecs, out.cluster_name, say=lines.append)
    refused = dispatch.tick()
    assert refused["first"] == "slot-high" and "RESOURCE:MEMORY" in refused["why"] and not lines
    # ... and once it stops, the first in line is placed, and only it.
    first = RunDir(runs_root(out.results_bucket), "slot-first").record()["task_arn"]
    ecs.stop_task(cluster=out.cluster_name, task=first, reason="the run ended")
    done = dispatch.tick()
    assert done["first"] == "slot-high" and done["waiting"] == 1 and done["started"].startswith("arn:aws:ecs:")
    started = launches.get("slot-high")
    assert started.task_arn == done["started"] and "slot-high's trainer placed" in lines[0]
    task = ecs.describe_tasks(cluster=out.cluster_name, tasks=[started.task_arn])["tasks"][0]
    env_of = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    assert env_of["RAYFLEET_RUN_NAME"] == "slot-high" and json.loads(env_of["RAYFLEET_RECIPE"])["priority"] == 5
    logs = verb(env, "-m", "rayfleet.cli.main", "logs", "--run", "slot-high")
    assert logs.returncode == 0, logs.stderr  # `make logs` finds the trainer the control task started
    assert [p.run for p in launches.waiting()] == ["slot-low"]

    cancelled = verb(env, "-m", "rayfleet.cli.main", "cancel", "--run", "slot-low")
    assert cancelled.returncode == 0 and "waited for a driver slot and never started" in cancelled.stdout
    assert launches.get("slot-low") is None
    assert RunDir(runs_root(out.results_bucket), "slot-low").record()["state"] == "CANCELLED"
    assert dispatch.tick() is None  # nothing waits any more
