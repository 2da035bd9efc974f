"""The S3 model cache of a worker group with `models_from = "s3"`, on what Terraform renders: the group's worker
task runs the plain ray-worker image, a model-cache container before it fills the instance's cache folder with
the task role, the Ray worker reads it read-only as MODEL_DIR, and only that group's instances prepare the
folder. The copy itself, under IAM, is tests/integration/test_model_cache_on_moto.py's; that the containers are
locked down is tests/infra/test_task_definitions.py's (its S3 shape).
"""

from __future__ import annotations

import base64
import json

import pytest

from rayfleet.core import bucket as layout
from rayfleet.core.model_cache import LINK
from tests.infra.test_task_definitions import S3_MODELS
from tools.rendered import resources
from tools.terraform_standin.render import rendered_state


@pytest.fixture(scope="module")
def state() -> dict:
    return rendered_state(variables={"worker_groups": S3_MODELS})


def containers(state: dict, family_suffix: str) -> dict[str, dict]:
    definition = next(
        r["values"]
        for r in resources(state)
        if r["type"] == "aws_ecs_task_definition" and r["values"]["family"].endswith(family_suffix)
    )
    return {c["name"]: c for c in json.loads(definition["container_definitions"])} | {"": definition}


def test_the_group_runs_the_plain_image_and_reads_the_cache_its_first_container_fills(state):
    fsdp = containers(state, "-ray-worker-fsdp")
    worker, cache, definition = fsdp["ray-worker"], fsdp["model-cache"], fsdp[""]
    assert worker["image"] == cache["image"] and not worker["image"].endswith("-models")  # no 14 GB layer to pull
    assert cache["command"] == ["model-cache"] and cache["essential"] is False
    assert worker["dependsOn"] == [{"containerName": "model-cache", "condition": "COMPLETE"}]
    env = {e["name"]: e["value"] for e in worker["environment"]}
    cache_env = {e["name"]: e["value"] for e in cache["environment"]}
    bucket = next(r["values"]["bucket"] for r in resources(state) if r["type"] == "aws_s3_bucket")
    assert cache_env["RAYFLEET_MODEL_CACHE_POINTER"] == f"s3://{bucket}/{layout.MODEL_CACHE}"  # the key core owns
    mounts = {c: {m["containerPath"]: m for m in fsdp[c]["mountPoints"]} for c in ("ray-worker", "model-cache")}
    folder = cache_env["RAYFLEET_DATA_CACHE"]
    assert env["MODEL_DIR"] == f"{folder}/{LINK}" and env["HF_HUB_OFFLINE"] == "1"
    assert mounts["ray-worker"][folder]["readOnly"] is True  # no job can change the weights
    assert mounts["model-cache"][folder]["readOnly"] is False
    volume = next(v for v in definition["volume"] if v["name"] == mounts["model-cache"][folder]["sourceVolume"])
    assert volume["host_path"] == "/opt/rayfleet/cache"


def test_only_the_cache_groups_instances_prepare_the_folder_and_the_other_group_is_unchanged(state):
    ddp = containers(state, "-ray-worker-ddp")
    assert set(ddp) == {"ray-worker", "gpu-metrics", ""} and "dependsOn" not in ddp["ray-worker"]
    user_data = {
        r["index"]: base64.b64decode(r["values"]["user_data"]).decode()
        for r in resources(state)
        if r["type"] == "aws_launch_template"
    }
    assert 'cache="${RAYFLEET_MODEL_CACHE_DIR:-/opt/rayfleet/cache}"' in user_data["worker-fsdp"]
    assert user_data["worker-fsdp"].index("ECS_CLUSTER=") < user_data["worker-fsdp"].index("RAYFLEET_MODEL_CACHE_DIR")
    assert "RAYFLEET_MODEL_CACHE_DIR" not in user_data["worker-ddp"] + user_data["head"]
    default = {
        r["index"]: r["values"]["user_data"] for r in resources(rendered_state()) if r["type"] == "aws_launch_template"
    }
    assert default["worker-ddp"] == base64.b64encode(user_data["worker-ddp"].encode()).decode()  # not replaced


def test_models_from_is_image_or_s3():
    from tools.terraform_standin.render import RenderFailed

    wrong = S3_MODELS.replace('models_from = "s3"', 'models_from = "efs"')
    with pytest.raises(RenderFailed, match="models_from"):
        rendered_state(variables={"worker_groups": wrong})
