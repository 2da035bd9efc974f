"""rayfleet deploy / plan / clean drive Terraform in the right order, save the outputs the verbs read, stop
paying before destroying, are safe to run twice, and fail in one line without terraform or credentials.

The verb's Terraform is a recording stand-in (tests/fakes/terraform, through RAYFLEET_TERRAFORM): what is
checked here is the order of the calls and what the verb does around them; Terraform's own work on infra/
(validate, test, apply in render mode) runs in tests/infra. The AWS side (credentials check, scaling
services to zero) is a real moto server."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pty
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from rayfleet.core import serve_kept as kept
from tests.integration.helpers import REPO, EcsMotoServer, run_verb, verbs_env
from tools.moto_stack import stack
from tools.terraform_standin.render import rendered_plan

pytestmark = pytest.mark.integration
FAKES = Path(__file__).resolve().parents[1] / "fakes"


@pytest.fixture
def deployable(ecs_moto, tmp_path):
    return _deployable(ecs_moto, tmp_path)


@pytest.fixture
def recording_moto(monkeypatch, tmp_path):
    """A moto server that records every request (moto's recorder), to show which calls a verb made."""
    monkeypatch.setenv("MOTO_ENABLE_RECORDING", "True")
    monkeypatch.setenv("MOTO_RECORDER_FILEPATH", str(tmp_path / "moto-recording"))
    server = EcsMotoServer().start()
    try:
        yield server
    finally:
        server.stop()


def recorded_actions(moto) -> list[str]:
    """The AWS actions moto received since the recording started: X-Amz-Target's operation, else the query's."""
    text = urllib.request.urlopen(f"{moto.url}/moto-api/recorder/download-recording", timeout=10).read().decode()
    actions = []
    for line in filter(None, text.splitlines()):
        entry = json.loads(line)
        target = entry.get("headers", {}).get("X-Amz-Target", "")
        actions.append(target.rsplit(".", 1)[-1] if target else urllib.parse.urlparse(entry["url"]).query)
    return actions


def recorded_forms(moto, action: str) -> list[dict]:
    """The form parameters of each query-protocol call of `action` (ElastiCache's) moto received since the
    recording started."""
    text = urllib.request.urlopen(f"{moto.url}/moto-api/recorder/download-recording", timeout=10).read().decode()
    entries = [json.loads(line) for line in filter(None, text.splitlines())]
    bodies = [base64.b64decode(e["body"]).decode() if e.get("body_encoded") else e.get("body", "") for e in entries]
    forms = [dict(urllib.parse.parse_qsl(body or "")) for body in bodies]
    return [form for form in forms if form.get("Action") == action]


def start_recording(moto) -> None:
    for verb in ("reset-recording", "start-recording"):
        request = urllib.request.Request(f"{moto.url}/moto-api/recorder/{verb}", method="POST")
        urllib.request.urlopen(request, timeout=10).close()


def _deployable(ecs_moto, tmp_path, picture: dict | None = None):
    outputs = stack.create(ecs_moto, tmp_path, picture, trainer_slots=1)
    terraform_outputs = tmp_path / "terraform-output.json"
    # what `terraform output -json` prints: {"name": {"value": ..., "type": ..., "sensitive": false}}
    plain = json.loads(Path(outputs["outputs_file"]).read_text())
    plain = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in plain.items()}
    terraform_outputs.write_text(json.dumps({k: {"value": v, "sensitive": False} for k, v in plain.items()}))
    plan = tmp_path / "plan.json"  # what `terraform show -json` of the saved plan prints: a real plan of infra/
    plan.write_text(json.dumps(rendered_plan()))
    env = verbs_env(
        ecs_moto.url,
        str(tmp_path / "rayfleet" / "outputs.json"),
        stack.REGION,
        RAYFLEET_TERRAFORM=str(FAKES / "terraform"),
        FAKE_TF_LOG=str(tmp_path / "terraform.log"),
        FAKE_TF_OUTPUTS=str(terraform_outputs),
        FAKE_TF_PLAN=str(plan),
    )
    return {"env": env, "moto": ecs_moto, "dir": tmp_path, "outputs": plain}


def calls(env) -> list[list[str]]:
    path = Path(env["FAKE_TF_LOG"])
    lines = path.read_text().splitlines() if path.exists() else []
    return [[a for a in json.loads(line) if not a.startswith("-chdir=")] for line in lines]


def test_deploy_inits_plans_applies_that_plan_and_saves_the_outputs(deployable):
    env = deployable["env"]
    result = run_verb(env, "deploy", "--yes", "--var-file", "one-group.tfvars", "--image-tag", "abc123def456")
    assert result.returncode == 0, result.stderr
    made = calls(env)
    assert [c[0] for c in made] == ["init", "plan", "show", "apply", "output"]
    plan, apply = made[1], made[3]
    assert made[2][-1] == apply[-1]  # the plan summarized, checked and priced is the one applied
    plan_file = next(a.split("=", 1)[1] for a in plan if a.startswith("-out="))
    assert apply[-1] == plan_file  # applies exactly the plan it showed
    assert "-var=image_tag=abc123def456" in plan and any(a.endswith("infra/one-group.tfvars") for a in plan)
    assert f"-var=region={stack.REGION}" in plan
    saved = json.loads(Path(env["RAYFLEET_OUTPUTS"]).read_text())
    assert saved["cluster_name"]["value"] == deployable["outputs"]["cluster_name"]
    assert "testing" not in result.stdout  # no credential echoed; the caller identity is
    assert "deploying as arn:aws:" in result.stdout


def test_deploy_stops_at_the_first_failing_step(deployable):
    env = {**deployable["env"], "FAKE_TF_FAIL_ON": "plan"}
    result = run_verb(env, "deploy", "--yes", "--image-tag", "t1")
    assert result.returncode == 1
    assert "terraform plan failed" in result.stderr
    assert [c[0] for c in calls(env)] == ["init", "plan"]  # never shown, checked or applied
    assert not Path(env["RAYFLEET_OUTPUTS"]).exists()


def test_clean_scales_to_zero_then_destroys_and_is_safe_twice(deployable):
    env, moto = deployable["env"], deployable["moto"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    first = run_verb(env, "deploy", "down", "--yes", timeout=300)
    assert first.returncode == 0, first.stderr
    ecs = moto.client("ecs")
    out = deployable["outputs"]
    names = [out["head_service_name"], out["worker_groups"]["default"]["service_name"]]
    services = ecs.describe_services(cluster=out["cluster_name"], services=names)
    assert [s["desiredCount"] for s in services["services"]] == [0, 0]
    assert [c[0] for c in calls(env)] == ["init", "destroy"]
    assert "-auto-approve" in calls(env)[1]
    assert not Path(env["RAYFLEET_OUTPUTS"]).exists()  # train-* is local again
    second = run_verb(env, "deploy", "down", "--yes")
    assert second.returncode == 0, second.stderr
    assert "nothing running to stop first" in second.stdout
    assert [c[0] for c in calls(env)] == ["init", "destroy", "init", "output", "destroy"]  # names from the state


def test_missing_terraform_is_one_clear_line(deployable, tmp_path):
    env = {**deployable["env"], "RAYFLEET_TERRAFORM": str(tmp_path / "no-terraform")}
    result = run_verb(env, "deploy", "plan")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: terraform not found at {tmp_path / 'no-terraform'}: `make setup` installs the pinned one"
    ]


def test_missing_credentials_is_one_clear_line(deployable, tmp_path):
    env = {k: v for k, v in deployable["env"].items() if not k.startswith(("AWS_ACCESS", "AWS_SECRET"))}
    env.update(
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    result = run_verb(env, "deploy")
    assert result.returncode == 1
    assert "no AWS credentials found" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not calls(env)  # terraform never ran


def test_a_missing_variable_file_is_named(deployable):
    result = run_verb(deployable["env"], "deploy", "plan", "--var-file", "nope.tfvars")
    assert result.returncode == 1
    assert "variable file nope.tfvars not found" in result.stderr


def _point_outputs_at(deployable, **values) -> None:
    path = Path(deployable["env"]["FAKE_TF_OUTPUTS"])
    document = json.loads(path.read_text())
    document.update({k: {"value": v, "sensitive": False} for k, v in values.items()})
    path.write_text(json.dumps(document))


def test_deploy_seeds_the_token_once_and_never_rolls_back_a_rotation(recording_moto, tmp_path):
    deployable = _deployable(recording_moto, tmp_path)
    env, sm = deployable["env"], recording_moto.client("secretsmanager")
    # What the apply leaves: the secret and its policy, no value (Terraform never writes or reads the token).
    arn = sm.create_secret(Name="rayfleet/ray-auth-token-fresh", Description="Ray token")["ARN"]
    # With gcs_store.enabled: the store (TLS, no token yet) and its token's secret, empty.
    store_arn = sm.create_secret(Name="rayfleet/gcs-store-token-fresh", Description="GCS store token")["ARN"]
    recording_moto.client("elasticache").create_replication_group(
        ReplicationGroupId="rayfleet-gcs",
        ReplicationGroupDescription="GCS",
        Engine="redis",
        TransitEncryptionEnabled=True,
    )
    store = {"replication_group_id": "rayfleet-gcs", "secret_arn": store_arn}
    _point_outputs_at(deployable, ray_token_secret_arn=arn, gcs_store=store)
    start_recording(recording_moto)

    first = run_verb(env, "deploy", "--yes", "--image-tag", "t1")
    assert first.returncode == 0, first.stderr
    actions = recorded_actions(recording_moto)
    assert actions.count("PutSecretValue") == 2 and "GetSecretValue" not in actions  # writes, never reads
    stages = sm.describe_secret(SecretId=arn)["VersionIdsToStages"]
    assert list(stages.values()) == [["AWSCURRENT"]]  # seeded: one version, current
    seeded = sm.get_secret_value(SecretId=arn)["SecretString"]
    assert len(seeded) == 64 and seeded not in first.stdout + first.stderr
    assert "seeded the Ray token" in first.stdout
    # The store got its AUTH token first, then the secret the head reads: the same value, printed nowhere.
    (modified,) = recorded_forms(recording_moto, "ModifyReplicationGroup")
    assert modified["ReplicationGroupId"] == "rayfleet-gcs" and modified["AuthTokenUpdateStrategy"] == "ROTATE"
    store_token = sm.get_secret_value(SecretId=store_arn)["SecretString"]
    assert modified["AuthToken"] == store_token and store_token != seeded and len(store_token) == 64
    assert store_token not in first.stdout + first.stderr and "seeded the GCS store's token" in first.stdout

    # rayfleet token rotate writes a new current version (tests/integration/test_ecs_rotate_token.py)
    rotated = sm.put_secret_value(SecretId=arn, SecretString="r" * 64)["VersionId"]
    start_recording(recording_moto)
    second = run_verb(env, "deploy", "--yes", "--image-tag", "t2")
    assert second.returncode == 0, second.stderr
    actions = recorded_actions(recording_moto)  # the verb's own calls, before this test reads anything
    assert "DescribeSecret" in actions and "GetSecretValue" not in actions and "PutSecretValue" not in actions
    assert "the Ray token: the secret already has a current value" in second.stdout
    assert not recorded_forms(recording_moto, "ModifyReplicationGroup")  # the store keeps its token too
    assert "the GCS store's token: the secret already has a current value" in second.stdout
    stages = sm.describe_secret(SecretId=arn)["VersionIdsToStages"]
    assert stages[rotated] == ["AWSCURRENT"] and len(stages) == 2  # no third version: nothing rolled back
    assert sm.get_secret_value(SecretId=arn)["SecretString"] == "r" * 64
    start_recording(recording_moto)
    plan = run_verb(env, "deploy", "plan", "--image-tag", "t2")
    assert plan.returncode == 0, plan.stderr
    assert "GetSecretValue" not in recorded_actions(recording_moto)


# -- make deploy and a running job: the head is not replaced under it unless forced ------------------------

HEAD_DEFINITION = "arn:aws:ecs:us-east-1:123456789012:task-definition/rayfleet-ray-head:1"


def plan_json(*changes: tuple[str, str, list[str]]) -> dict:
    """`terraform show -json` of a saved plan with these (type, name, actions) changes in module.ray."""
    resource_changes = []
    for type_name, name, actions in changes:
        before = {"task_definition": HEAD_DEFINITION} if type_name == "aws_ecs_service" else {"arn": HEAD_DEFINITION}
        after_unknown = {"task_definition": True} if type_name == "aws_ecs_service" else {"arn": True}
        resource_changes.append(
            {
                "address": f"module.ray.{type_name}.{name}",
                "module_address": "module.ray",
                "type": type_name,
                "name": name,
                "change": {"actions": actions, "before": before, "after": {}, "after_unknown": after_unknown},
            }
        )
    return {"format_version": "1.2", "resource_changes": resource_changes}


HEAD_REPLACED = plan_json(
    ("aws_ecs_task_definition", "head", ["delete", "create"]), ("aws_ecs_service", "head", ["update"])
)
WORKERS_ONLY = plan_json(
    ("aws_ecs_task_definition", "worker", ["delete", "create"]), ("aws_ecs_service", "worker", ["update"])
)


@pytest.fixture
def deployed_with_a_job(deployable):
    """A deployment whose outputs file exists, with a recipe run RUNNING and its trainer task running."""
    env, moto, out = deployable["env"], deployable["moto"], deployable["outputs"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    record = {"run": "ddp-20260101-000000", "state": "RUNNING", "target": "ecs"}
    moto.client("s3").put_object(
        Bucket=out["results_bucket"], Key="runs/ddp-20260101-000000/run.json", Body=json.dumps(record).encode()
    )
    started = moto.client("ecs").run_task(
        cluster=out["cluster_name"],
        taskDefinition=out["trainer_task_definition"],
        startedBy="rayfleet",
        networkConfiguration={
            "awsvpcConfiguration": {
                "subnets": out["private_subnet_ids"],
                "securityGroups": [out["task_security_group_id"]],
            }
        },
    )
    assert len(started["tasks"]) == 1, started["failures"]
    return deployable


def with_plan(deployable, changes: dict) -> dict:
    """The fixture's real plan of infra/ with these changes to module.ray in place of its own."""
    path = Path(deployable["env"]["FAKE_TF_PLAN"])
    plan = json.loads(path.read_text())
    replaced = {c["address"] for c in changes["resource_changes"]}
    kept = [c for c in plan["resource_changes"] if c["address"] not in replaced]
    plan["resource_changes"] = kept + changes["resource_changes"]
    path.write_text(json.dumps(plan))
    return deployable["env"]


def test_deploy_refuses_to_replace_the_head_while_a_job_runs_or_an_application_serves(deployed_with_a_job):
    """A running trainer task, a RUNNING run record and, kept by `make serve`, a served run each hold the head."""
    env = with_plan(deployed_with_a_job, HEAD_REPLACED)
    bucket = deployed_with_a_job["outputs"]["results_bucket"]
    kept.keep(deployed_with_a_job["moto"].client("s3"), bucket, "clf", {"applications": [{"name": "rayfleet"}]})
    result = run_verb(env, "deploy", "--yes", "--image-tag", "t2")
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: this plan replaces the Ray head (module.ray.aws_ecs_task_definition.head")
    assert "ddp-20260101-000000" in line and "1 trainer task" in line and "rayfleet deploy --force" in line
    assert "serving run clf" in line and "rayfleet serve down" in line
    assert [c[0] for c in calls(env)] == ["init", "plan", "show"]  # never applied


def test_deploy_with_force_replaces_the_head_anyway(deployed_with_a_job):
    env = with_plan(deployed_with_a_job, HEAD_REPLACED)
    result = run_verb(env, "deploy", "--yes", "--image-tag", "t2", "--force")
    assert result.returncode == 0, result.stderr
    assert "FORCE: replacing the Ray head (module.ray.aws_ecs_task_definition.head" in result.stdout  # said
    assert [c[0] for c in calls(env)][-2:] == ["apply", "output"]


def test_deploy_goes_ahead_when_the_plan_leaves_the_head_alone(deployed_with_a_job):
    env = with_plan(deployed_with_a_job, WORKERS_ONLY)
    result = run_verb(env, "deploy", "--yes", "--image-tag", "t2")
    assert result.returncode == 0, result.stderr
    assert [c[0] for c in calls(env)][-2:] == ["apply", "output"]


def test_deploy_replaces_the_head_when_no_job_runs(deployable):
    env = deployable["env"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    env = with_plan(deployable, HEAD_REPLACED)
    result = run_verb(env, "deploy", "--yes", "--image-tag", "t2")
    assert result.returncode == 0, result.stderr
    assert [c[0] for c in calls(env)][-2:] == ["apply", "output"]


MANIFEST = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
    "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json",
        "size": 7,
        "digest": "sha256:" + "c" * 64,
    },
    "layers": [],
}


def _fill(deployable) -> tuple[str, list[str]]:
    """Results in the bucket (two versions of one key, a delete marker) and two images in every repository."""
    moto, out = deployable["moto"], deployable["outputs"]
    s3, ecr = moto.client("s3"), moto.client("ecr")
    bucket = out["results_bucket"]
    for body in (b"one", b"two"):
        s3.put_object(Bucket=bucket, Key="runs/ddp-1/metrics.jsonl", Body=body)
    s3.put_object(Bucket=bucket, Key="runs/ddp-1/run.json", Body=b"{}")
    s3.delete_object(Bucket=bucket, Key="runs/ddp-1/run.json")  # a delete marker over one version
    repositories = [url.split("/", 1)[1] for url in out["ecr_repository_urls"].values()]
    for name in repositories:  # the moto stack makes no repositories: the registry module's, by their names
        ecr.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")
        for tag in ("0123456789ab", "ba9876543210"):
            layer = {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 1}
            layer["digest"] = "sha256:" + hashlib.sha256(f"{name}:{tag}".encode()).hexdigest()
            manifest = {**MANIFEST, "layers": [layer]}  # moto's digest follows the layers: one image per tag
            ecr.put_image(repositoryName=name, imageManifest=json.dumps(manifest), imageTag=tag)
    return bucket, repositories


def _versions(s3, bucket: str) -> int:
    page = s3.list_object_versions(Bucket=bucket)
    return len(page.get("Versions", [])) + len(page.get("DeleteMarkers", []))


def test_clean_keeps_results_without_consent_and_touches_nothing(deployable):
    env, moto = deployable["env"], deployable["moto"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    bucket, repositories = _fill(deployable)
    refused = run_verb(env, "deploy", "down", "--yes")
    assert refused.returncode == 1
    assert f"the results bucket {bucket} holds 2 object(s) (4 versions and delete markers)" in refused.stderr
    assert (
        "rayfleet deploy down --delete-results" in refused.stderr
        and "nothing was stopped or destroyed" in refused.stderr
    )
    assert [c[0] for c in calls(env)] == ["init"]  # never destroy
    assert _versions(moto.client("s3"), bucket) == 4
    assert len(moto.client("ecr").describe_images(repositoryName=repositories[0])["imageDetails"]) == 2
    services = moto.client("ecs").describe_services(
        cluster=deployable["outputs"]["cluster_name"], services=[deployable["outputs"]["head_service_name"]]
    )
    assert services["services"][0]["desiredCount"] == 1  # not even stopped


def test_clean_empties_bucket_and_registry_and_survives_a_partial_failure_twice(deployable, tmp_path):
    env, moto = deployable["env"], deployable["moto"]
    out = deployable["outputs"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    bucket, repositories = _fill(deployable)
    s3, ecr, ecs = moto.client("s3"), moto.client("ecr"), moto.client("ecs")
    left = tmp_path / "state-list"
    left.write_text("module.iam.aws_kms_key.this\nmodule.storage.aws_s3_bucket.results\n")

    # 1. destroy fails half-way (say, the key's deletion was refused): what is left, and why, is named
    failing = {**env, "FAKE_TF_FAIL_ON": "destroy", "FAKE_TF_STATE_LIST": str(left)}
    first = run_verb(failing, "deploy", "down", "--yes", "--delete-results", timeout=300)
    assert first.returncode == 1
    assert "terraform destroy failed" in first.stderr
    assert "2 resource(s) left in the state: module.iam.aws_kms_key.this, module.storage.aws_s3_bucket.results" in (
        first.stderr
    )
    assert "rayfleet deploy down --delete-results" in first.stderr  # what to run again
    assert _versions(s3, bucket) == 0  # every version and delete marker
    assert all(ecr.describe_images(repositoryName=r)["imageDetails"] == [] for r in repositories)
    assert Path(env["RAYFLEET_OUTPUTS"]).exists()  # kept: the next clean still knows what to empty

    # 2. Terraform got further before failing: the cluster, one repository and the bucket are gone already
    ecs.delete_service(cluster=out["cluster_name"], service=out["worker_groups"]["default"]["service_name"], force=True)
    ecs.delete_service(cluster=out["cluster_name"], service=out["head_service_name"], force=True)
    for arn in ecs.list_container_instances(cluster=out["cluster_name"])["containerInstanceArns"]:
        ecs.deregister_container_instance(cluster=out["cluster_name"], containerInstance=arn, force=True)
    ecs.delete_cluster(cluster=out["cluster_name"])
    ecr.delete_repository(repositoryName=repositories[0])
    s3.delete_bucket(Bucket=bucket)
    second = run_verb(env, "deploy", "down", "--yes", "--delete-results", timeout=300)
    assert second.returncode == 0, second.stderr
    assert f"bucket {bucket} is already gone" in second.stdout
    assert f"repository {repositories[0]} is already gone" in second.stdout
    assert not Path(env["RAYFLEET_OUTPUTS"]).exists()

    # 3. and once more, with nothing left at all
    third = run_verb(env, "deploy", "down", "--yes", "--delete-results")
    assert third.returncode == 0, third.stderr
    assert [c[0] for c in calls(env)][-3:] == ["init", "output", "destroy"]  # an empty state: nothing to empty
    assert "nothing running to stop first" in third.stdout


AUTOSCALING_ROLE = "AWSServiceRoleForAutoScaling"


def test_a_fresh_account_gets_the_autoscaling_role_before_terraform_runs(deployable):
    """The KMS key policy names Auto Scaling's service-linked role, which a fresh account lacks (AWS makes it with
    the first Auto Scaling group) and KMS refuses a policy naming a missing principal: make deploy creates it
    first, once; an account that has it is left alone."""
    env, iam = deployable["env"], deployable["moto"].client("iam")
    with pytest.raises(iam.exceptions.NoSuchEntityException):
        iam.get_role(RoleName=AUTOSCALING_ROLE)  # moto starts as a fresh account
    first = run_verb(env, "deploy", "--yes", "--image-tag", "t1")
    assert first.returncode == 0, first.stderr
    role = iam.get_role(RoleName=AUTOSCALING_ROLE)["Role"]
    assert role["Path"] == "/aws-service-role/autoscaling.amazonaws.com/"
    assert "created Auto Scaling's service-linked role" in first.stdout
    # after the question, before the apply that makes the key
    assert (
        first.stdout.index("cost: ")
        < first.stdout.index("service-linked role")
        < first.stdout.index("+ terraform apply")
    )
    second = run_verb(env, "deploy", "--yes", "--image-tag", "t1")
    assert second.returncode == 0, second.stderr
    assert "service-linked role" not in second.stdout
    assert iam.get_role(RoleName=AUTOSCALING_ROLE)["Role"]["RoleId"] == role["RoleId"]  # the same one, kept


def _push(ecr, repositories: list[str], tag: str, also: str = "") -> None:
    """What `make push` leaves in ECR: one image per repository, tagged with the 12-character commit; `also`
    puts that same image (the same manifest) under another tag, as deploy's mark does."""
    for name in repositories:
        layer = {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 1}
        layer["digest"] = "sha256:" + hashlib.sha256(f"{name}:{tag}".encode()).hexdigest()
        manifest = json.dumps({**MANIFEST, "layers": [layer]})
        ecr.put_image(repositoryName=name, imageManifest=manifest, imageTag=also or tag)


def _marked(ecr, name: str) -> dict[str, list[str]]:
    """deployed-* tag -> the image's other tags, for every image so marked."""
    images = ecr.describe_images(repositoryName=name, filter={"tagStatus": "TAGGED"})["imageDetails"]
    return {
        t: sorted(x for x in i["imageTags"] if x != t)
        for i in images
        for t in i["imageTags"]
        if t.startswith("deployed-")
    }


def test_deploy_marks_the_running_image_so_the_lifecycle_never_expires_it(deployable):
    env, ecr, out = deployable["env"], deployable["moto"].client("ecr"), deployable["outputs"]
    repositories = [url.split("/", 1)[1] for url in out["ecr_repository_urls"].values()]
    for name in repositories:
        ecr.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")
    tags = [f"{n:012x}" for n in range(1, 14)]  # 13 commits, pushed in order
    for tag in tags:
        _push(ecr, repositories, tag)
    for tag in tags[:10]:  # ten earlier deploys, marked as deploy marks them (one verb run each took 30 s)
        _push(ecr, repositories, tag, also=f"deployed-{tag}")
    assert all(len(_marked(ecr, name)) == 10 for name in repositories)
    for tag in tags[10:12]:  # two more, through the verb: each mark past the tenth unmarks the oldest
        result = run_verb(env, "deploy", "--yes", "--image-tag", tag)
        assert result.returncode == 0, result.stderr
        for name in repositories:
            marked = _marked(ecr, name)
            assert marked[f"deployed-{tag}"] == [tag]  # the running image carries the protected tag
            assert len(marked) <= 10  # never more than the lifecycle's rule 1 keeps: it expires none
    assert f"marked {len(repositories)} image(s) deployed-{tags[11]}" in result.stdout
    # a rollback to an image older than the ten marked ones: marked, and still at most ten
    rollback = run_verb(env, "deploy", "--yes", "--image-tag", tags[0])
    assert rollback.returncode == 0, rollback.stderr
    marked = _marked(ecr, repositories[0])
    assert f"deployed-{tags[0]}" in marked and f"deployed-{tags[11]}" in marked and len(marked) <= 10
    assert len(ecr.describe_images(repositoryName=repositories[0])["imageDetails"]) == 13  # untagging deletes none
    # a tag not pushed yet (a first deploy): nothing to mark, said so; `make push` of that tag marks it
    unpushed = run_verb(env, "deploy", "--yes", "--image-tag", "fedcba987654")
    assert unpushed.returncode == 0, unpushed.stderr
    assert "not pushed yet" in unpushed.stdout


# -- asked first: deploy shows the plan's summary and cost, clean names what goes; nothing before the answer --


def answered(env: dict, answer: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """The verb on a terminal (a pty as its stdin), answering its question with `answer`."""
    main, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rayfleet.cli.main", *args],
            env=env,
            cwd=REPO,
            stdin=terminal,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.write(main, f"{answer}\n".encode())
        out, err = proc.communicate(timeout=timeout)
    finally:
        os.close(terminal)
        os.close(main)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_deploy_without_a_terminal_or_yes_refuses_before_terraform(deployable):
    env = deployable["env"]
    result = run_verb(env, "deploy", "--image-tag", "t1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: rayfleet deploy asks before applying and there is no terminal to ask on; rayfleet deploy --yes applies"
    ]
    assert not calls(env)


def test_deploy_shows_summary_and_cost_then_applies_only_on_yes(recording_moto, tmp_path):
    deployable = _deployable(recording_moto, tmp_path)
    env = deployable["env"]
    start_recording(recording_moto)
    declined = answered(env, "n", "deploy", "--image-tag", "t1")
    assert declined.returncode == 1, declined.stderr
    assert [c[0] for c in calls(env)] == ["init", "plan", "show"]  # planned and priced, never applied
    out = declined.stdout
    assert "plan: 113 to add, 0 to change, 0 to destroy" in out  # infra/'s default: two worker groups
    assert "cost: $13.79/h running, $0.429/h idle (autostopped), $0.045/h stopped (rayfleet deploy stop)" in out
    assert "  worker group ddp: 0-2 x g5.xlarge at $1.006/h, $2.01/h at full size" in out
    assert "  worker group fsdp: 0-2 x g5.12xlarge at $5.672/h, $11.34/h at full size" in out
    assert out.index("preflight: ") < out.index("cost: ") < out.index("apply this plan? [y/N]")
    assert "not applied: nothing changed" in out
    mutations = [a for a in recorded_actions(recording_moto) if a.startswith(("Create", "Put", "Update", "Delete"))]
    assert mutations == []  # not even the service-linked role
    accepted = answered(env, "y", "deploy", "--image-tag", "t1")
    assert accepted.returncode == 0, accepted.stderr
    assert [c[0] for c in calls(env)][3:] == ["init", "plan", "show", "apply", "output"]


def test_clean_asks_once_first_and_an_answer_of_no_changes_nothing(recording_moto, tmp_path):
    deployable = _deployable(recording_moto, tmp_path)
    env = deployable["env"]
    Path(env["RAYFLEET_OUTPUTS"]).parent.mkdir(parents=True)
    shutil.copy(env["FAKE_TF_OUTPUTS"], env["RAYFLEET_OUTPUTS"])
    bucket, repositories = _fill(deployable)
    start_recording(recording_moto)
    declined = answered(env, "no", "deploy", "down", "--delete-results")
    assert declined.returncode == 1, declined.stderr
    out, cluster = declined.stdout, deployable["outputs"]["cluster_name"]
    assert f"rayfleet deploy down destroys: the ECS cluster {cluster} in {stack.REGION}" in out
    assert f"every image in {len(repositories)} ECR repositories" in out
    assert f"the results bucket {bucket} with its 2 object(s), every version deleted" in out
    assert "destroy all of it? [y/N]" in out and "not destroyed: nothing was stopped, emptied or deleted" in out
    actions = recorded_actions(recording_moto)
    assert actions and not [a for a in actions if a.startswith(("Create", "Put", "Update", "Delete", "Stop", "Batch"))]
    assert [c[0] for c in calls(env)] == ["init"]  # never destroy
    moto = deployable["moto"]
    assert _versions(moto.client("s3"), bucket) == 4
    assert len(moto.client("ecr").describe_images(repositoryName=repositories[0])["imageDetails"]) == 2
    services = moto.client("ecs").describe_services(
        cluster=cluster, services=[deployable["outputs"]["head_service_name"]]
    )
    assert services["services"][0]["desiredCount"] == 1

    refused = run_verb(env, "deploy", "down", "--delete-results")  # no terminal, no AUTO_APPROVE
    assert refused.returncode == 2 and "rayfleet deploy down --delete-results --yes" in refused.stderr
    assert [c[0] for c in calls(env)] == ["init"]  # refused before even Terraform's init

    accepted = answered(env, "y", "deploy", "down", "--delete-results", timeout=300)
    assert accepted.returncode == 0, accepted.stderr
    assert [c[0] for c in calls(env)][1:] == ["init", "destroy"]
    assert "-auto-approve" in calls(env)[-1]  # asked once, by rayfleet: Terraform does not ask again
    assert _versions(moto.client("s3"), bucket) == 0


def test_ctrl_c_reaches_terraform_once_and_rayfleet_waits_for_its_state(deployable):
    """Ctrl-C sent to rayfleet alone (as the terminal does: Terraform runs in its own process group) reaches
    Terraform as one SIGINT, and rayfleet exits 130 only after Terraform has written its state and ended."""
    env = {**deployable["env"], "FAKE_TF_SLOW": "apply:3"}
    events = Path(env["FAKE_TF_LOG"] + ".events")
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.cli.main", "deploy", "--yes", "--image-tag", "t1"],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (events.exists() and events.read_text().startswith("started")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    terraform_pid = int(events.read_text().split()[1])
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert events.read_text().splitlines()[1:] == ["SIGINT", "state written"]  # one SIGINT, then it finished
    with pytest.raises(ProcessLookupError):
        os.kill(terraform_pid, 0)  # ended before rayfleet did
    assert "interrupted: terraform apply got SIGINT; waiting while it stops cleanly" in err
    assert not Path(env["RAYFLEET_OUTPUTS"]).exists()  # no outputs saved from an interrupted apply


def test_deploy_marks_the_models_image_of_the_groups_with_models(ecs_moto, tmp_path):
    """On infra/'s own default groups (fsdp has models = true), deploy also marks ray-worker's <tag>-models, the
    image fsdp's workers run, so the lifecycle never expires it; the plain images as before."""
    deployable = _deployable(ecs_moto, tmp_path, stack.default_picture(var_files=()))
    env, ecr, out = deployable["env"], ecs_moto.client("ecr"), deployable["outputs"]
    assert [g for g, w in out["worker_groups"].items() if w["models"]] == ["fsdp"]
    repositories = [url.split("/", 1)[1] for url in out["ecr_repository_urls"].values()]
    worker = out["ecr_repository_urls"]["ray-worker"].split("/", 1)[1]
    for name in repositories:
        ecr.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")
    _push(ecr, repositories, "0000000000a1")
    _push(ecr, [worker], "0000000000a1-models")
    result = run_verb(env, "deploy", "--yes", "--image-tag", "0000000000a1")
    assert result.returncode == 0, result.stderr
    assert _marked(ecr, worker) == {
        "deployed-0000000000a1": ["0000000000a1"],
        "deployed-0000000000a1-models": ["0000000000a1-models"],
    }
