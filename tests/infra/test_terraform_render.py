"""The stand-in providers' render mode: a plain `terraform apply` of infra/ offline, and the state it leaves.

Terraform evaluates everything (the same apply `make deploy` runs, no mock_provider); the stand-in answers
what AWS would compute with deterministic, realistic values (tools/terraform_standin/values.py). These
tests check that the rendered state reads like a deployment's (ids and ARNs of the right shape, for the
account and region; the data sources answered), that it is the same every time, that infra/fsdp.tfvars
renders too, that a data source render mode does not know is refused by name, and that the deployment
picture (tools/rendered.py) carries Terraform's own rendering.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from tools import rendered
from tools.terraform_standin import values
from tools.terraform_standin.render import RenderFailed, rendered_state
from tools.terraform_standin.workspace import INFRA

ACCOUNT = values.ACCOUNT
ID_SHAPES = {
    "aws_vpc": r"vpc-0[0-9a-f]{16}",
    "aws_subnet": r"subnet-0[0-9a-f]{16}",
    "aws_security_group": r"sg-0[0-9a-f]{16}",
    "aws_kms_key": r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
    "aws_service_discovery_private_dns_namespace": r"ns-[a-z2-7]{16}",
    "aws_service_discovery_service": r"srv-[a-z2-7]{16}",
    "aws_launch_template": r"lt-0[0-9a-f]{16}",
    "aws_vpc_security_group_ingress_rule": r"sgr-0[0-9a-f]{16}",
}


@pytest.fixture(scope="module")
def default_state() -> dict:
    return rendered_state()


def _by_address(state: dict) -> dict[str, dict]:
    return {r["address"]: r for r in rendered.resources(state)}


def test_the_default_shape_applies_offline_with_realistic_ids_and_arns(default_state):
    everything = _by_address(default_state)
    managed = [r for r in everything.values() if r["mode"] == "managed"]
    assert len(managed) > 80
    text = json.dumps(default_state)
    assert "standin-" not in text  # no placeholder left anywhere
    for r in managed:
        v = r["values"]
        shape = ID_SHAPES.get(r["type"])
        if shape:
            assert re.fullmatch(shape, v["id"]), (r["address"], v["id"])
        for key in ("arn", "dashboard_arn"):
            if v.get(key):
                assert v[key].startswith("arn:aws:"), (r["address"], v[key])
                assert f":{ACCOUNT}:" in v[key] or v[key].startswith(("arn:aws:s3:::", "arn:aws:iam::")), v[key]
        if "tags_all" in v:  # the provider's default_tags merged with the resource's tags, at plan time
            assert v["tags_all"]["Project"] == "rayfleet" and v["tags_all"]["Deployment"] == "rayfleet"
            assert all(v["tags_all"][k] == t for k, t in (v.get("tags") or {}).items())
    role = everything["module.iam.aws_iam_role.execution"]["values"]
    assert role["arn"] == f"arn:aws:iam::{ACCOUNT}:role/rayfleet-task-execution"
    trainer = everything["module.ray.aws_ecs_task_definition.trainer"]["values"]
    assert trainer["arn"] == f"arn:aws:ecs:us-east-1:{ACCOUNT}:task-definition/rayfleet-trainer:1"
    bucket = everything["module.storage.aws_s3_bucket.results"]["values"]["bucket"]
    assert re.fullmatch(r"rayfleet-results-\d{26}", bucket)  # bucket_prefix + Terraform's unique suffix
    secret = everything["module.ray.aws_secretsmanager_secret.ray_token"]["values"]
    assert re.fullmatch(r"rayfleet/ray-auth-token-\d{26}", secret["name"])
    assert re.fullmatch(
        rf"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:{secret['name']}-[A-Za-z0-9]{{6}}", secret["arn"]
    )
    assert not [a for a in everything if ".random_password." in a or "secretsmanager_secret_version" in a]
    policy = json.loads(everything["module.ray.aws_secretsmanager_secret_policy.ray_token"]["values"]["policy"])
    writer = next(s for s in policy["Statement"] if s["Sid"] == "DeployerWrites")
    assert writer["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:user/rayfleet-deployer"}  # the caller, via IAM
    repository = everything['module.registry.aws_ecr_repository.this["trainer"]']["values"]
    assert repository["repository_url"] == f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com/rayfleet/trainer"


def test_the_data_sources_answer_as_aws_would(default_state):
    data = {r["address"]: r["values"] for r in rendered.resources(default_state) if r["mode"] == "data"}
    zones = data["module.network.data.aws_availability_zones.available"]
    assert zones["names"][:2] == ["us-east-1a", "us-east-1b"] and zones["zone_ids"][0] == "use1-az1"
    assert data["module.iam.data.aws_caller_identity.current"]["account_id"] == ACCOUNT
    assert data["module.iam.data.aws_partition.current"]["partition"] == "aws"
    assert data["module.network.data.aws_region.current"]["name"] == "us-east-1"
    for flavour in ("cpu", "gpu"):
        ami = data[f'module.cluster.data.aws_ssm_parameter.ami["{flavour}"]']["value"]
        assert re.fullmatch(r"ami-0[0-9a-f]{16}", ami)
    subnet = _by_address(default_state)["module.network.aws_subnet.private[0]"]["values"]
    assert subnet["availability_zone"] == "us-east-1a" and subnet["cidr_block"] == "10.42.0.0/20"


def test_the_same_configuration_renders_the_same_state(default_state):
    # Equal, not fast: a time limit here failed on a loaded 2-core machine (a timed test measures the machine).
    assert rendered_state(cached=False) == default_state


def test_fsdp_tfvars_renders_the_efa_shape():
    state = rendered_state(var_files=["fsdp.tfvars"])
    everything = _by_address(state)
    worker = everything["module.ray.aws_ecs_task_definition.worker"]["values"]
    assert worker["network_mode"] == "host"
    containers = json.loads(worker["container_definitions"])
    assert containers[0]["resourceRequirements"] == [{"type": "GPU", "value": "4"}]
    assert containers[0]["linuxParameters"]["devices"][0]["hostPath"] == "/dev/infiniband/uverbs0"
    group = everything['module.cluster.aws_placement_group.this["worker"]']["values"]
    asg = everything['module.cluster.aws_autoscaling_group.this["worker"]']["values"]
    assert asg["placement_group"] == group["id"] == "rayfleet-worker"
    picture = rendered.picture(state)
    assert picture["nodeGroups"]["worker"]["instanceType"] == "g5.12xlarge"
    assert "networkConfiguration" not in next(s for s in picture["services"] if s["taskDefinition"] == "worker")


def test_a_data_source_render_mode_does_not_know_is_refused_by_name(tmp_path):
    infra = tmp_path / "infra"
    shutil.copytree(INFRA, infra, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    (infra / "extra.tf").write_text('data "aws_iam_policy_document" "extra" {}\n')
    with pytest.raises(RenderFailed, match="does not answer data source aws_iam_policy_document"):
        rendered_state(infra=infra)


def test_the_picture_carries_terraforms_rendering(default_state):
    picture = rendered.picture(default_state)
    everything = _by_address(default_state)
    for key in ("head", "worker", "trainer"):
        tf = everything[f"module.ray.aws_ecs_task_definition.{key}"]["values"]
        spec = picture["taskDefinitions"][key]
        assert spec["containerDefinitions"] == json.loads(tf["container_definitions"])
        assert (spec["executionRoleArn"], spec["taskRoleArn"]) == (tf["execution_role_arn"], tf["task_role_arn"])
        assert picture["taskDefinitionArns"][key] == tf["arn"]
    services = {s["serviceName"]: s for s in picture["services"]}
    assert services["rayfleet-ray-worker"]["desiredCount"] == 2
    assert services["rayfleet-ray-head"]["serviceRegistries"][0]["service"] == "head"
    assert picture["outputs"]["trainer_task_definition"] == "rayfleet-trainer:1"
    assert picture["nodeGroups"]["head"]["attributes"] == {"rayfleet.node-group": "head"}
    assert set(picture["secrets"][0]) <= {"name", "arn", "description", "kmsKeyId", "tags"}  # never a value
    tasks_group = next(g for g in picture["network"]["securityGroups"] if g["key"] == "tasks")
    ports = {(r["fromPort"], r["toPort"]) for r in tasks_group["ingress"]}
    assert (6379, 6379) in ports and all(r["referencedGroupId"] == tasks_group["id"] for r in tasks_group["ingress"])


class _Unknown:
    pass


def test_renderer_plan_leaves_computed_unknown_and_merges_default_tags():
    unknown = _Unknown()
    r = values.Renderer(unknown)
    r.configure({"region": "eu-west-1", "default_tags": [{"tags": {"Project": "p"}}]})
    block = {
        "attributes": {
            "arn": {"type": "string", "computed": True},
            "name": {"type": "string", "required": True},
            "tags": {"type": ["map", "string"], "optional": True},
            "tags_all": {"type": ["map", "string"], "optional": True, "computed": True},
        }
    }
    planned = r.plan(
        "aws_cloudwatch_log_group", {"name": "/x", "tags": {"A": "b"}, "arn": None, "tags_all": None}, None, block
    )
    assert planned["arn"] is unknown and planned["tags_all"] == {"Project": "p", "A": "b"}
    applied = r.apply("aws_cloudwatch_log_group", planned, block)
    assert applied["arn"] == f"arn:aws:logs:eu-west-1:{ACCOUNT}:log-group:/x"
