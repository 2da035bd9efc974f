"""The moto stack is what Terraform renders: the task definitions, services and outputs the verbs meet in moto
are infra/'s, so a change to infra/ reaches the verb tests (tools/moto_stack/stack.py, tools/rendered.py)."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from rayfleet.ecs.outputs import Outputs
from tests.integration.helpers import run_verb, verbs_env
from tools.moto_stack import stack
from tools.terraform_standin.workspace import INFRA

pytestmark = pytest.mark.integration
RENDERED_KEYS = (
    "name",
    "image",
    "essential",
    "command",
    "memory",
    "environment",
    "secrets",
    "linuxParameters",
    "ulimits",
    "healthCheck",
    "logConfiguration",
    "resourceRequirements",
    "stopTimeout",
)


def _env(server, outputs: dict) -> dict:
    return verbs_env(server.url, outputs["outputs_file"], stack.REGION)


def _definition(server, name: str) -> dict:
    return server.client("ecs").describe_task_definition(taskDefinition=name)["taskDefinition"]


def _containers(definition: dict) -> dict[str, dict]:
    return {c["name"]: c for c in definition["containerDefinitions"]}


def _environment(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("environment", [])}


def test_moto_holds_the_task_definitions_exactly_as_terraform_rendered_them(aws_stack):
    server, picture, out = aws_stack["server"], aws_stack["picture"], aws_stack["outputs"]
    secret = out["ray_token_secret_arn"]  # moto's ARN of the rendered secret
    assert secret != picture["outputs"]["ray_token_secret_arn"] and secret.split(":secret:")[1].startswith(
        picture["secrets"][0]["name"]
    )
    for key, spec in picture["taskDefinitions"].items():
        # the revision the stack registered (a recipe with its own image registers later revisions)
        moto_definition = _definition(server, out["ids"][picture["taskDefinitionArns"][key]])
        assert moto_definition["networkMode"] == spec["networkMode"]
        assert moto_definition["executionRoleArn"] == spec["executionRoleArn"]  # the rendered role ARNs
        assert moto_definition["taskRoleArn"] == spec["taskRoleArn"]
        containers = _containers(moto_definition)
        assert list(containers) == [c["name"] for c in spec["containerDefinitions"]], key
        for rendered in spec["containerDefinitions"]:
            expected = json.loads(json.dumps(rendered).replace(picture["outputs"]["ray_token_secret_arn"], secret))
            got = containers[rendered["name"]]
            assert {k: got.get(k) for k in RENDERED_KEYS if k in expected} == {
                k: expected[k] for k in RENDERED_KEYS if k in expected
            }, f"{key}/{rendered['name']}"
    trainer = _containers(_definition(server, out["trainer_task_definition"]))[out["trainer_container_name"]]
    assert trainer["command"] == ["ddp"] and trainer["secrets"] == [{"name": "RAY_AUTH_TOKEN", "valueFrom": secret}]
    head = _containers(_definition(server, out["ids"][picture["taskDefinitionArns"]["head"]]))["ray-head"]
    assert head["healthCheck"]["command"] == ["CMD", "rayfleet-node", "health"]
    assert head["linuxParameters"] == {
        "sharedMemorySize": 3171,
        "initProcessEnabled": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_services_tasks_and_outputs_are_the_rendered_deployment(aws_stack):
    server, picture, out = aws_stack["server"], aws_stack["picture"], aws_stack["outputs"]
    ecs = server.client("ecs")
    loaded = Outputs.load(out["outputs_file"])  # what the verbs read
    assert loaded.cluster_name == picture["outputs"]["cluster_name"] == "rayfleet"
    assert loaded.results_bucket == picture["bucket"]["name"]
    assert loaded.private_subnet_ids == [
        aws_stack["outputs"]["ids"][s] for s in picture["outputs"]["private_subnet_ids"]
    ]
    services = ecs.describe_services(
        cluster=loaded.cluster_name,
        services=[loaded.head_service_name, loaded.group("default").service_name, loaded.control_service_name],
    )
    by_name = {s["serviceName"]: s for s in services["services"]}
    for rendered in picture["services"]:
        service = by_name[rendered["serviceName"]]
        assert service["desiredCount"] == rendered["desiredCount"]
        assert service["taskDefinition"] == out["ids"][picture["taskDefinitionArns"][rendered["taskDefinition"]]]
        network = service["networkConfiguration"]["awsvpcConfiguration"]
        assert (
            network["securityGroups"] == [loaded.task_security_group_id]
            and network["subnets"] == loaded.private_subnet_ids
        )
    head_registry = by_name[loaded.head_service_name]["serviceRegistries"][0]["registryArn"]
    discovery = server.client("servicediscovery").get_service(Id=head_registry.rsplit("/", 1)[-1])["Service"]
    assert discovery["Name"] == "head" and discovery["DnsConfig"]["DnsRecords"] == [{"Type": "A", "TTL": 10}]
    # The service tasks run where the placement constraints put them: head on the head group, one worker per GPU node.
    arns = ecs.list_tasks(cluster=loaded.cluster_name, desiredStatus="RUNNING")["taskArns"]
    tasks = ecs.describe_tasks(cluster=loaded.cluster_name, tasks=arns)["tasks"]
    instances = {
        ci["containerInstanceArn"]: {a["name"]: a.get("value") for a in ci["attributes"]}
        for ci in ecs.describe_container_instances(
            cluster=loaded.cluster_name,
            containerInstances=ecs.list_container_instances(cluster=loaded.cluster_name)["containerInstanceArns"],
        )["containerInstances"]
    }
    for role, service in (("head", loaded.head_service_name), ("worker", loaded.group("default").service_name)):
        placed = [t["containerInstanceArn"] for t in tasks if t["group"] == f"service:{service}"]
        assert placed and all(instances[arn]["rayfleet.node-group"] == role for arn in placed)
        assert len(set(placed)) == len(placed)  # distinctInstance (and one head)
    log_groups = {g["logGroupName"] for g in server.client("logs").describe_log_groups()["logGroups"]}
    assert set(out["log_groups"].values()) <= log_groups


def test_a_changed_command_and_environment_in_terraform_reach_the_moto_stack(ecs_moto, tmp_path):
    """Patch a scratch copy of infra/ (the trainer's command, a new environment variable) and render it with a
    changed variable (object_store_fraction): the task definitions in moto follow, as the verbs would see."""
    infra = tmp_path / "infra"
    shutil.copytree(INFRA, infra, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    definitions = infra / "modules" / "ray" / "task_definitions.tf"
    text = definitions.read_text()
    old_command = 'command          = ["ddp"] # launch overrides it with the job and its arguments'
    old_env = '{ name = "RAYFLEET_METRICS_NAMESPACE", value = var.metric_namespace },'  # one of trainer_environment
    assert old_command in text and text.count(old_env) == 1
    text = text.replace(old_command, 'command          = ["ddp", "epochs=1"]')
    added = '{ name = "RAYFLEET_CHANGED_IN_TERRAFORM", value = "yes" }'
    text = text.replace(old_env, f"{old_env} {added},")
    definitions.write_text(text)
    picture = stack.default_picture(infra=infra, variables={"object_store_fraction": "0.2"})
    outputs = stack.create(ecs_moto, tmp_path, picture, trainer_slots=1)

    trainer = _containers(_definition(ecs_moto, outputs["trainer_task_definition"]))["trainer"]
    assert trainer["command"] == ["ddp", "epochs=1"]
    env = _environment(trainer)
    assert env["RAYFLEET_CHANGED_IN_TERRAFORM"] == "yes"
    sizes = outputs["task_sizes_mib"]
    assert env["RAYFLEET_OBJECT_STORE_MIB"] == str(sizes["trainer"]["object_store"]) == str(math.floor(5898 * 0.2))
    head = _containers(_definition(ecs_moto, picture["taskDefinitions"]["head"]["family"]))["ray-head"]
    assert _environment(head)["RAYFLEET_OBJECT_STORE_MIB"] == str(math.floor(8591 * 0.2))  # was 2147 (0.25)
    worker = _containers(_definition(ecs_moto, picture["taskDefinitions"]["worker"]["family"]))["ray-worker"]
    assert _environment(worker)["RAYFLEET_OBJECT_STORE_MIB"] == str(math.floor(14489 * 0.2))  # was 4346 (0.3)
    assert "RAYFLEET_CHANGED_IN_TERRAFORM" not in _environment(worker)


def test_the_default_groups_deploy_at_zero(ecs_moto, tmp_path):
    """infra/'s defaults: worker groups ddp (g5.xlarge, 1 GPU, awsvpc) and fsdp (g5.12xlarge with EFA: host
    networking, so no ENI; 4 GPUs), each its own service at zero, and the outputs' map names both."""
    picture = stack.default_picture(var_files=())
    outputs = stack.create(ecs_moto, tmp_path, picture, trainer_slots=1)
    ecs = ecs_moto.client("ecs")
    groups = outputs["worker_groups"]
    assert {n: (g["instance_types"], g["min_nodes"], g["max_nodes"], g["efa"]) for n, g in groups.items()} == {
        "ddp": (["g5.xlarge"], 0, 2, False),
        "fsdp": (["g5.12xlarge"], 0, 2, True),
    }
    fsdp = _definition(ecs_moto, picture["taskDefinitions"]["worker-fsdp"]["family"])
    ddp = _definition(ecs_moto, picture["taskDefinitions"]["worker-ddp"]["family"])
    assert fsdp["networkMode"] == "host" and ddp["networkMode"] == "awsvpc"
    assert _containers(fsdp)["ray-worker"]["resourceRequirements"] == [{"type": "GPU", "value": "4"}]
    assert _environment(_containers(fsdp)["ray-worker"])["RAYFLEET_WORKER_GROUP"] == "fsdp"
    services = ecs.describe_services(
        cluster=outputs["cluster_name"], services=[g["service_name"] for g in groups.values()]
    )
    assert sorted((s["serviceName"], s["desiredCount"]) for s in services["services"]) == [
        ("rayfleet-ray-worker-ddp", 0),
        ("rayfleet-ray-worker-fsdp", 0),
    ]
    status = run_verb(_env(ecs_moto, outputs), "status", "--json")
    assert status.returncode == 0, status.stderr
    shown = {s["name"]: s["desired"] for s in json.loads(status.stdout)["services"]}
    assert shown["rayfleet-ray-worker-ddp"] == shown["rayfleet-ray-worker-fsdp"] == 0


def test_terraforms_sizes_leave_room_for_one_trainer_beside_the_head(ecs_moto, tmp_path):
    """A finding the hand-written stack hid (256 CPU units, 1 GiB per task): the head instance holds the head
    (60% of its memory) and one trainer (40%); a second `rayfleet launch` is refused with ECS's reason."""
    outputs = stack.create(ecs_moto, tmp_path, trainer_slots=1)
    env = _env(ecs_moto, outputs)
    first = run_verb(env, "launch", "ddp", "--name", "first", "--detach")
    assert first.returncode == 0, first.stderr
    second = run_verb(env, "launch", "ddp", "--name", "second", "--detach")
    assert second.returncode == 1
    assert "ECS could not place the trainer: RESOURCE:MEMORY" in second.stderr, second.stderr
