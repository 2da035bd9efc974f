"""make deploy / plan / clean drive Terraform in the right order, save the outputs the verbs read, stop
paying before destroying, are safe to run twice, and fail in one line without terraform or credentials.

Terraform itself is a stand-in (tests/fakes/terraform) because providers cannot be downloaded here; the AWS
side (credentials check, scaling services to zero) is a real moto_server."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.integration import aws_stack as stack
from tests.integration.conftest import run_verb

pytestmark = pytest.mark.integration
FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def deployable(moto, tmp_path):
    outputs = stack.create(moto, tmp_path)
    terraform_outputs = tmp_path / "terraform-output.json"
    # what `terraform output -json` prints: {"name": {"value": ..., "type": ..., "sensitive": false}}
    plain = json.loads(Path(outputs["outputs_file"]).read_text())
    plain = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in plain.items()}
    terraform_outputs.write_text(json.dumps({k: {"value": v, "sensitive": False} for k, v in plain.items()}))
    env = {
        **os.environ,
        "PATH": f"{FAKES}:{os.environ['PATH']}",
        "AWS_ENDPOINT_URL": moto.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": stack.REGION,
        "RAYFLEET_OUTPUTS": str(tmp_path / "rayfleet" / "outputs.json"),
        "FAKE_TF_LOG": str(tmp_path / "terraform.log"),
        "FAKE_TF_OUTPUTS": str(terraform_outputs),
    }
    env.pop("AWS_PROFILE", None)
    return {"env": env, "moto": moto, "dir": tmp_path, "outputs": plain}


def calls(env) -> list[list[str]]:
    path = Path(env["FAKE_TF_LOG"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [[a for a in json.loads(line) if not a.startswith("-chdir=")] for line in lines]


def test_deploy_inits_plans_applies_that_plan_and_saves_the_outputs(deployable):
    env = deployable["env"]
    result = run_verb(env, "infra", "deploy", "--var-file", "fsdp.tfvars", "--image-tag", "abc123def456")
    assert result.returncode == 0, result.stderr
    made = calls(env)
    assert [c[0] for c in made] == ["init", "plan", "apply", "output"]
    plan, apply = made[1], made[2]
    plan_file = next(a.split("=", 1)[1] for a in plan if a.startswith("-out="))
    assert apply[-1] == plan_file  # applies exactly the plan it showed
    assert "-var=image_tag=abc123def456" in plan and any(a.endswith("infra/fsdp.tfvars") for a in plan)
    assert f"-var=region={stack.REGION}" in plan
    saved = json.loads(Path(env["RAYFLEET_OUTPUTS"]).read_text())
    assert saved["cluster_name"]["value"] == deployable["outputs"]["cluster_name"]
    assert "testing" not in result.stdout  # no credential echoed; the caller identity is
    assert "deploying as arn:aws:" in result.stdout


def test_deploy_stops_at_the_first_failing_step(deployable):
    env = {**deployable["env"], "FAKE_TF_FAIL_ON": "plan"}
    result = run_verb(env, "infra", "deploy", "--image-tag", "t1")
    assert result.returncode == 1
    assert "terraform plan failed" in result.stderr
    assert [c[0] for c in calls(env)] == ["init", "plan"]  # never applied
    assert not Path(env["RAYFLEET_OUTPUTS"]).exists()


def test_clean_scales_to_zero_then_destroys_and_is_safe_twice(deployable):
    env, moto = deployable["env"], deployable["moto"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    first = run_verb(env, "infra", "destroy", "--auto-approve", timeout=300)
    assert first.returncode == 0, first.stderr
    ecs = moto.client("ecs")
    out = deployable["outputs"]
    names = [out["head_service_name"], out["worker_service_name"]]
    services = ecs.describe_services(cluster=out["cluster_name"], services=names)
    assert [s["desiredCount"] for s in services["services"]] == [0, 0]
    assert [c[0] for c in calls(env)] == ["init", "destroy"]
    assert "-auto-approve" in calls(env)[1]
    assert not Path(env["RAYFLEET_OUTPUTS"]).exists()  # train-* is local again
    second = run_verb(env, "infra", "destroy", "--auto-approve")
    assert second.returncode == 0, second.stderr
    assert "nothing running to stop first" in second.stdout
    assert [c[0] for c in calls(env)] == ["init", "destroy", "init", "destroy"]


def test_missing_terraform_is_one_clear_line(deployable):
    env = {**deployable["env"], "PATH": str(Path(os.sys.executable).parent) + ":/bin"}
    result = run_verb(env, "infra", "plan")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        "error: terraform not found on PATH: install Terraform >= 1.5 (https://developer.hashicorp.com/terraform/install)"
    ]


def test_missing_credentials_is_one_clear_line(deployable, tmp_path):
    env = {k: v for k, v in deployable["env"].items() if not k.startswith(("AWS_ACCESS", "AWS_SECRET"))}
    env.update(AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"), AWS_CONFIG_FILE=str(tmp_path / "none"),
               AWS_EC2_METADATA_DISABLED="true")  # fmt: skip
    result = run_verb(env, "infra", "deploy")
    assert result.returncode == 1
    assert "no AWS credentials found" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not calls(env)  # terraform never ran


def test_a_missing_variable_file_is_named(deployable):
    result = run_verb(deployable["env"], "infra", "plan", "--var-file", "nope.tfvars")
    assert result.returncode == 1
    assert "variable file nope.tfvars not found" in result.stderr
