"""The stand-in providers' render mode: a plain `terraform apply` of infra/ offline, and the state it leaves.

Terraform evaluates everything (the same apply `make deploy` runs, no mock_provider); the stand-in answers
what AWS would compute with deterministic, realistic values (tools/terraform_standin/values.py). These
tests check that the rendered state reads like a deployment's (ids and ARNs of the right shape, for the
account and region; the data sources answered), that it is the same every time, that the root turns the
worker groups into what AWS would get (the defaults' two groups at zero, EFA only for fsdp; several groups'
Spot policies, types and placement groups), that a data source render mode does not know is refused by name,
and that the deployment picture (tools/rendered.py) carries Terraform's own rendering.
"""

from __future__ import annotations

import base64
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


def _by_index(state: dict, address: str) -> dict:
    """index -> values of every instance of one resource (module.x.type.name) of a for_each."""
    return {r["index"]: r["values"] for r in rendered.resources(state) if r["address"].split("[")[0] == address}


def test_the_defaults_render_two_worker_groups_at_zero_with_efa_only_for_fsdp(default_state):
    """The root applied as a deployment would, with infra/'s default worker_groups (ddp: up to 2 x g5.xlarge,
    fsdp: up to 2 x g5.12xlarge with EFA): an Auto Scaling group, capacity provider, task definition and service
    per group, none running; only fsdp gets host networking, an EFA interface and a cluster placement group.
    The worker_groups output names what was rendered."""
    asgs = _by_index(default_state, "module.cluster.aws_autoscaling_group.this")
    providers = _by_index(default_state, "module.cluster.aws_ecs_capacity_provider.this")
    templates = _by_index(default_state, "module.cluster.aws_launch_template.this")
    placement = _by_index(default_state, "module.cluster.aws_placement_group.this")
    services = _by_index(default_state, "module.ray.aws_ecs_service.worker")
    definitions = _by_index(default_state, "module.ray.aws_ecs_task_definition.worker")

    assert set(asgs) == set(providers) == set(templates) == {"head", "worker-ddp", "worker-fsdp"}
    assert {k: (a["min_size"], a["max_size"]) for k, a in asgs.items()} == {
        "head": (0, 1),
        "worker-ddp": (0, 2),
        "worker-fsdp": (0, 2),
    }
    assert {k: p["name"] for k, p in providers.items()} == {
        "head": "rayfleet-head",
        "worker-ddp": "rayfleet-worker-ddp",
        "worker-fsdp": "rayfleet-worker-fsdp",
    }
    assert set(services) == set(definitions) == {"ddp", "fsdp"}
    for group, service in services.items():
        assert service["name"] == f"rayfleet-ray-worker-{group}" and service["desired_count"] == 0, service
        assert [c["capacity_provider"] for c in service["capacity_provider_strategy"]] == [f"rayfleet-worker-{group}"]
        assert service["task_definition"] == definitions[group]["arn"]
        assert definitions[group]["family"] == f"rayfleet-ray-worker-{group}"

    assert {g: d["network_mode"] for g, d in definitions.items()} == {"ddp": "awsvpc", "fsdp": "host"}
    fsdp, ddp = (json.loads(definitions[g]["container_definitions"])[0] for g in ("fsdp", "ddp"))
    assert fsdp["resourceRequirements"] == [{"type": "GPU", "value": "4"}]
    assert [d["hostPath"] for d in fsdp["linuxParameters"]["devices"]] == ["/dev/infiniband/uverbs0"]
    assert ddp["resourceRequirements"] == [{"type": "GPU", "value": "1"}] and "devices" not in ddp["linuxParameters"]
    assert [n["interface_type"] for n in templates["worker-fsdp"]["network_interfaces"]] == ["efa"]
    assert templates["worker-ddp"]["network_interfaces"] == [] == templates["head"]["network_interfaces"]
    assert set(placement) == {"worker-fsdp"} and placement["worker-fsdp"]["strategy"] == "cluster"
    assert asgs["worker-fsdp"]["placement_group"] == placement["worker-fsdp"]["id"] == "rayfleet-worker-fsdp"
    assert not asgs["worker-ddp"]["placement_group"]

    out = rendered.outputs(default_state)["worker_groups"]
    assert set(out) == {"ddp", "fsdp"}
    for group, o in out.items():
        node_group = f"worker-{group}"
        assert o["service_name"] == services[group]["name"]
        assert o["autoscaling_group"] == asgs[node_group]["name"]
        assert o["capacity_provider"] == providers[node_group]["name"]
        assert (o["min_nodes"], o["max_nodes"], o["spot"]) == (0, 2, "on-demand")
    assert (out["ddp"]["efa"], out["ddp"]["gpus"], out["fsdp"]["efa"], out["fsdp"]["gpus"]) == (False, 1, True, 4)


GROUPS = (
    "{"
    'steady = {instance_types = ["g5.xlarge", "g6.xlarge"], max = 3}, '
    'cheap = {instance_types = ["g6.xlarge", "g5.xlarge"], spot = "spot-preferred", on_demand_base = 1, max = 4}, '
    'only = {instance_types = ["g5.2xlarge"], spot = "spot-only"}, '
    'efa = {instance_types = ["g6.12xlarge"], efa = true, placement_group = false}'
    "}"
)


def test_the_root_gives_each_group_its_types_spot_policy_and_placement():
    """What the cluster module's own tests (infra/tests/spot.tftest.hcl) are given, made by the root from
    worker_groups: one mixed-instances override per type of a group with several, on demand above the base
    only for an on-demand group, Spot (with its on-demand base, capacity rebalancing and the Spot notice
    poller) for both spot-preferred and spot-only, and a placement group only where asked (EFA without one)."""
    state = rendered_state(variables={"worker_groups": GROUPS})
    asgs = _by_index(state, "module.cluster.aws_autoscaling_group.this")
    templates = _by_index(state, "module.cluster.aws_launch_template.this")
    assert set(asgs) == {"head", "worker-steady", "worker-cheap", "worker-only", "worker-efa"}

    def policy(key):
        p = asgs[key]["mixed_instances_policy"][0]
        d = p["instances_distribution"][0]
        overrides = [o["instance_type"] for o in p["launch_template"][0]["override"]]
        return overrides, d["on_demand_base_capacity"], d["on_demand_percentage_above_base_capacity"]

    assert policy("worker-steady") == (["g5.xlarge", "g6.xlarge"], 0, 100)
    assert policy("worker-cheap") == (["g6.xlarge", "g5.xlarge"], 1, 0)
    assert policy("worker-only") == ([], 0, 0)  # one type: the launch template's own
    assert policy("worker-efa") == ([], 0, 100)
    assert {k: a["capacity_rebalance"] for k, a in asgs.items()} == {
        "head": False,
        "worker-steady": False,
        "worker-cheap": True,
        "worker-only": True,
        "worker-efa": False,
    }
    spot_notice = "systemctl enable --now rayfleet-spot-notice.service"
    for key, template in templates.items():
        user_data = base64.b64decode(template["user_data"]).decode()
        assert f'if [ "{str(asgs[key]["capacity_rebalance"]).lower()}" = "true" ]; then\n  {spot_notice}' in user_data
    assert [n["interface_type"] for n in templates["worker-efa"]["network_interfaces"]] == ["efa"]
    assert _by_index(state, "module.cluster.aws_placement_group.this") == {}
    assert not any(a["placement_group"] for a in asgs.values())
    sizes = rendered.outputs(state)["task_sizes_mib"]["workers"]
    assert sizes["steady"] == sizes["cheap"] == {"memory": 14489, "shm": 5370, "object_store": 4346}


def test_a_data_source_render_mode_does_not_know_is_refused_by_name(tmp_path):
    infra = tmp_path / "infra"
    shutil.copytree(INFRA, infra, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    (infra / "extra.tf").write_text('data "aws_iam_policy_document" "extra" {}\n')
    with pytest.raises(RenderFailed, match="does not answer data source aws_iam_policy_document"):
        rendered_state(infra=infra)


def test_the_picture_carries_terraforms_rendering(default_state):
    picture = rendered.picture(default_state)
    everything = _by_address(default_state)
    addresses = {
        "head": "module.ray.aws_ecs_task_definition.head",
        "trainer": "module.ray.aws_ecs_task_definition.trainer",
        "worker-ddp": 'module.ray.aws_ecs_task_definition.worker["ddp"]',  # a worker group's key: its node group
        "worker-fsdp": 'module.ray.aws_ecs_task_definition.worker["fsdp"]',
    }
    for key, address in addresses.items():
        tf = everything[address]["values"]
        spec = picture["taskDefinitions"][key]
        assert spec["containerDefinitions"] == json.loads(tf["container_definitions"])
        assert (spec["executionRoleArn"], spec["taskRoleArn"]) == (tf["execution_role_arn"], tf["task_role_arn"])
        assert picture["taskDefinitionArns"][key] == tf["arn"]
    services = {s["serviceName"]: s for s in picture["services"]}
    assert [services[f"rayfleet-ray-worker-{g}"]["desiredCount"] for g in ("ddp", "fsdp")] == [0, 0]
    assert services["rayfleet-ray-worker-fsdp"]["taskDefinition"] == "worker-fsdp"
    assert services["rayfleet-ray-head"]["serviceRegistries"][0]["service"] == "head"
    assert picture["outputs"]["trainer_task_definition"] == "rayfleet-trainer:1"
    assert picture["nodeGroups"]["head"]["attributes"] == {"rayfleet.node-group": "head"}
    assert picture["nodeGroups"]["worker-fsdp"]["attributes"] == {"rayfleet.node-group": "worker-fsdp"}
    assert picture["nodeGroups"]["worker-fsdp"]["instanceType"] == "g5.12xlarge"
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
