"""After `rayfleet deploy stop` (or an autostop) a plan shows no changes, and so a deploy does not bring the GPUs back.

Stop, start and autostop set the ECS services' desired counts through the API; the services ignore
`desired_count` after creation (infra/modules/ray/main.tf). Here: apply infra/ offline with the stand-in
providers in render mode (as tools/terraform_standin/render.py does, but keeping the state, which the
render cache does not), set every service to zero in the state as `make stop` leaves them (the stand-in's
refresh returns the state as it is, as AWS would answer DescribeServices), then `terraform plan
-detailed-exitcode` must exit 0. Without the ignore_changes it exits 2 with `desired_count = 0 -> 2`.
The default worker groups start at zero, where a stop changes nothing; so the two groups here keep nodes
running (min 2 and 1), as a deployment whose groups have a min does, and the stop takes both to zero.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.terraform_standin.render import IMAGE_TAG, RENDER_ENV
from tools.terraform_standin.workspace import Terraform, scratch_copy

GROUPS = (
    '{ddp = {instance_types = ["g5.xlarge"], min = 2, max = 2}, '
    'fsdp = {instance_types = ["g5.12xlarge"], efa = true, min = 1, max = 2}}'
)
# the counts a fresh deploy of these groups creates, by (resource name, worker group)
SERVICES = {("head", None): 1, ("control", None): 1, ("worker", "ddp"): 2, ("worker", "fsdp"): 1}
VARS = (f"-var=image_tag={IMAGE_TAG}", f"-var=worker_groups={GROUPS}")


def _services(state: dict) -> dict[tuple[str, str | None], dict]:
    """(name, for_each key) -> attributes of module.ray's aws_ecs_service instances, in a `state pull` document."""
    return {
        (r["name"], instance.get("index_key")): instance["attributes"]
        for r in state["resources"]
        if r.get("module") == "module.ray" and r["type"] == "aws_ecs_service"
        for instance in r["instances"]
    }


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> tuple[Terraform, Path]:
    tf = Terraform()
    root = scratch_copy(tmp_path_factory.mktemp("stop-then-plan"))
    init = tf.init(root)
    assert init.returncode == 0, init.output
    apply = tf.run(root, "apply", "-auto-approve", "-input=false", "-no-color", *VARS, env=RENDER_ENV)
    assert apply.returncode == 0, apply.output[-6000:]
    return tf, root


def test_a_plan_after_make_stop_shows_no_changes(deployed, tmp_path):
    tf, root = deployed
    pulled = tf.run(root, "state", "pull", env=RENDER_ENV)
    assert pulled.returncode == 0, pulled.output
    state = json.loads(pulled.stdout)
    assert {n: s["desired_count"] for n, s in _services(state).items()} == SERVICES

    for attributes in _services(state).values():  # what `make stop` and autostop with head = true leave
        attributes["desired_count"] = 0
    state["serial"] += 1
    stopped = tmp_path / "stopped.tfstate"
    stopped.write_text(json.dumps(state))
    pushed = tf.run(root, "state", "push", str(stopped), env=RENDER_ENV)
    assert pushed.returncode == 0, pushed.output
    after = json.loads(tf.run(root, "state", "pull", env=RENDER_ENV).stdout)
    assert {n: s["desired_count"] for n, s in _services(after).items()} == dict.fromkeys(SERVICES, 0)

    plan = tf.run(root, "plan", "-detailed-exitcode", "-input=false", "-no-color", *VARS, env=RENDER_ENV)
    assert plan.returncode == 0, f"the plan after a stop is not empty (exit {plan.returncode})\n{plan.output[-6000:]}"
    assert "No changes." in plan.stdout
