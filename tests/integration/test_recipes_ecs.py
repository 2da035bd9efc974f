"""A recipe run on ECS, against moto_server: the launcher's half (code zip and resolved recipe in the bucket,
RunTask overrides carrying the recipe, a custom image as a task-definition revision), then the trainer's
half (scripts/recipe_driver.py) for real: it submits the uploaded zip by its S3 URI to the real local
Ray cluster, whose runtime-env agents download it from the moto bucket, and records the result in S3."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import zipfile

import pytest
import yaml

from tests.integration.conftest import DASHBOARD_PORT, REPO

pytestmark = pytest.mark.integration
BUCKET = "rf-test-results"
SECRET_VALUE = "hf_not-a-real-token-but-secret-all-the-same"
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/custom-trainer:v7"
SCRIPT = """
import json, os, sys
print("recipe on ecs:", sys.argv[1:], "token length", len(os.environ["HF_TOKEN"]), "in", os.environ["RAYFLEET_RUN_DIR"])
import helper
print("helper says", helper.VALUE)
"""


def write_recipe(tmp_path, **extra):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "train.py").write_text(SCRIPT)
    (code / "helper.py").write_text("VALUE = 'shipped'\n")
    recipe = {"name": "ecs-job", "code": "code", "entrypoint": "train.py", "args": ["--lr", "0.1"],
              "env": {"HF_TOKEN": {"secret": "secretsmanager:rf-test/recipes/hf-token"}, "MODE": "fast"},
              "resources": {"workers": 2, "cpus_per_worker": 2, "gpus_per_worker": 1}, **extra}  # fmt: skip
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def run_recipe(env, *args, timeout=180):
    return subprocess.run([sys.executable, "-m", "scripts.run_recipe", *args], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.fixture(scope="module")
def launched(aws_stack, tmp_path_factory):
    server = aws_stack["server"]
    server.client("secretsmanager").create_secret(Name="rf-test/recipes/hf-token", SecretString=SECRET_VALUE)
    recipe = write_recipe(tmp_path_factory.mktemp("recipe"), image=IMAGE, pip=["einops==0.8.1"])
    result = run_recipe(aws_stack["env"], str(recipe), "--target", "ecs", "--run-name", "ecs-1", "--detach",
                        "--", "--epochs", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return {"result": result, "server": server, "s3": server.client("s3"), "ecs": server.client("ecs")}


def _object(s3, key) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()


def test_code_zip_and_resolved_recipe_land_under_the_run_prefix(launched):
    s3 = launched["s3"]
    record = json.loads(_object(s3, "runs/ecs-1/run.json"))
    assert record["target"] == "ecs" and record["state"] == "SUBMITTED"
    body = _object(s3, f"runs/ecs-1/code-{record['code_sha256'][:12]}.zip")
    assert hashlib.sha256(body).hexdigest() == record["code_sha256"]
    assert record["code"] == f"s3://{BUCKET}/runs/ecs-1/code-{record['code_sha256'][:12]}.zip"
    assert sorted(zipfile.ZipFile(io.BytesIO(body)).namelist()) == ["helper.py", "train.py"]
    resolved = yaml.safe_load(_object(s3, "runs/ecs-1/recipe.yaml"))
    assert resolved["env"]["HF_TOKEN"] == {"secret": "secretsmanager:rf-test/recipes/hf-token"}
    assert resolved["resources"] == {"workers": 2, "cpus_per_worker": 2.0, "gpus_per_worker": 1}
    assert resolved["image"] == IMAGE and resolved["pip"] == ["einops==0.8.1"]
    for key in ("runs/ecs-1/run.json", "runs/ecs-1/recipe.yaml", "runs/ecs-1/launch.json"):
        assert SECRET_VALUE.encode() not in _object(s3, key)


def test_runtask_overrides_carry_the_recipe_and_the_image_revision(launched, aws_stack):
    s3, ecs = launched["s3"], launched["ecs"]
    record = json.loads(_object(s3, "runs/ecs-1/run.json"))
    task = ecs.describe_tasks(cluster="rf-test", tasks=[record["task_arn"]])["tasks"][0]
    override = task["overrides"]["containerOverrides"][0]
    assert override["command"] == ["recipe"]
    env = {e["name"]: e["value"] for e in override["environment"]}
    assert env["RAYFLEET_RUN_NAME"] == "ecs-1" and env["RAYFLEET_CODE_URI"] == record["code"]
    assert env["RAYFLEET_STORAGE"] == f"s3://{BUCKET}/runs"
    assert json.loads(env["RAYFLEET_EXTRA_ARGS"]) == ["--epochs", "2"]
    carried = json.loads(env["RAYFLEET_RECIPE"])
    assert carried == yaml.safe_load(_object(s3, "runs/ecs-1/recipe.yaml"))  # the same resolved recipe
    assert SECRET_VALUE not in json.dumps(override)
    definition = ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
    assert task["taskDefinitionArn"] == record["task_definition"] != aws_stack["outputs"]["trainer_task_definition"]
    assert definition["containerDefinitions"][0]["image"] == IMAGE
    assert definition["family"] == "rf-test-trainer"


def test_trainer_submits_the_s3_code_to_the_cluster_and_records_the_result(launched, aws_stack, cluster_env):
    s3, ecs = launched["s3"], launched["ecs"]
    record = json.loads(_object(s3, "runs/ecs-1/run.json"))
    task = ecs.describe_tasks(cluster="rf-test", tasks=[record["task_arn"]])["tasks"][0]
    overrides = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    recipe = json.loads(overrides["RAYFLEET_RECIPE"])
    recipe.pop("pip")  # a per-job pip environment needs an index on the nodes; the rest is what the task gets
    overrides["RAYFLEET_RECIPE"] = json.dumps(recipe)
    env = {**aws_stack["env"], **cluster_env, **overrides, "AWS_ENDPOINT_URL": aws_stack["env"]["AWS_ENDPOINT_URL"],
           "RAYFLEET_DASHBOARD_URL": f"http://127.0.0.1:{DASHBOARD_PORT}"}  # set by rayfleet-node on ECS  # fmt: skip
    result = subprocess.run([sys.executable, "-m", "scripts.recipe_driver"], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"token length {len(SECRET_VALUE)}" in result.stdout and "helper says shipped" in result.stdout
    assert "['--lr', '0.1', '--epochs', '2']" in result.stdout
    done = json.loads(_object(s3, "runs/ecs-1/run.json"))
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0 and done["job_id"].startswith("rayfleet-ecs-1-")
    assert done["code_sha256"] == record["code_sha256"]  # the launcher's fields survive the trainer's update
    log = _object(s3, "runs/ecs-1/driver.log").decode()
    assert f"s3://{BUCKET}/runs/ecs-1" in log and "helper says shipped" in log
    assert SECRET_VALUE not in log + result.stdout + result.stderr


def test_recipe_beyond_the_worker_instance_is_refused_before_upload(aws_stack, tmp_path):
    recipe = write_recipe(tmp_path, resources={"workers": 1, "gpus_per_worker": 4})
    result = run_recipe(aws_stack["env"], str(recipe), "--target", "ecs", "--run-name", "too-big", "--detach")
    assert result.returncode == 2
    assert "gpus_per_worker: 4 GPUs, but a worker of the ECS workers (g5.xlarge) has 1" in result.stderr
    listed = aws_stack["server"].client("s3").list_objects_v2(Bucket=BUCKET, Prefix="runs/too-big/")
    assert listed.get("KeyCount", 0) == 0


def test_env_secrets_are_refused_on_ecs(aws_stack, tmp_path):
    recipe = write_recipe(tmp_path, env={"HF_TOKEN": {"secret": "env:HF_TOKEN"}},
                          resources={"workers": 1})  # fmt: skip
    result = run_recipe(aws_stack["env"], str(recipe), "--target", "ecs", "--run-name", "env-secret", "--detach")
    assert result.returncode == 1 and "env: secrets exist only where `make run` runs" in result.stderr


def test_make_runs_lists_s3_runs_with_their_state(launched, aws_stack, tmp_path):
    result = subprocess.run([sys.executable, "-m", "scripts.runs", "--json", "--local-dir", str(tmp_path)],
                            env=aws_stack["env"], cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = {r["run"]: r for r in json.loads(result.stdout)}
    row = rows["ecs-1"]
    assert row["where"] == "ecs" and row["results"] == f"s3://{BUCKET}/runs/ecs-1/"
    record = json.loads(_object(launched["s3"], "runs/ecs-1/run.json"))
    expected = record["state"]
    if expected == "SUBMITTED":  # before the trainer records the job, the task's own state is asked from ECS
        expected = launched["ecs"].describe_tasks(cluster="rf-test", tasks=[record["task_arn"]])["tasks"][0][
            "lastStatus"
        ]
    assert row["state"] == expected and expected != "SUBMITTED"
