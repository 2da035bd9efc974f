"""A recipe run on ECS, against moto_server: the launcher's half (code zip and resolved recipe in the bucket,
RunTask overrides carrying the recipe, a custom image as a task-definition revision), then the trainer's
half (rayfleet/node/driver/recipe.py) for real: it submits the uploaded zip by its S3 URI to the real local
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

from rayfleet.core import ledger as ledger_fields
from rayfleet.train.data import synthetic
from rayfleet.train.data.text import read_text
from tests.integration.helpers import DASHBOARD_PORT, REPO, run_record

pytestmark = pytest.mark.integration
# Under <name>/recipes/, the only secrets the task role may read (infra/modules/iam); <name>: the default var.name.
SECRET_NAME = "rayfleet/recipes/hf-token"
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
    recipe = {
        "name": "ecs-job",
        "code": "code",
        "entrypoint": "train.py",
        "args": ["--lr", "0.1"],
        "env": {"HF_TOKEN": {"secret": f"secretsmanager:{SECRET_NAME}"}, "MODE": "fast"},
        "resources": {"workers": 2, "cpus_per_worker": 2, "gpus_per_worker": 1},
        **extra,
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def run_recipe(env, *args, timeout=180):
    return subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", "run", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def launched(aws_stack, tmp_path_factory):
    server = aws_stack["server"]
    assert SECRET_NAME.startswith(f"{aws_stack['outputs']['cluster_name']}/recipes/")
    server.client("secretsmanager").create_secret(Name=SECRET_NAME, SecretString=SECRET_VALUE)
    # The user's own repository, tags immutable: rayfleet/ecs/image_policy.py accepts the image by its tag.
    server.client("ecr").create_repository(repositoryName="custom-trainer", imageTagMutability="IMMUTABLE")
    recipe = write_recipe(tmp_path_factory.mktemp("recipe"), image=IMAGE, pip=["einops==0.8.1"])
    result = run_recipe(
        aws_stack["env"], str(recipe), "--on", "ecs", "--name", "ecs-1", "--detach", "--", "--epochs", "2"
    )
    assert result.returncode == 0, result.stderr
    return {
        "result": result,
        "server": server,
        "s3": server.client("s3"),
        "ecs": server.client("ecs"),
        "bucket": aws_stack["outputs"]["results_bucket"],
        "cluster": aws_stack["outputs"]["cluster_name"],
        "env": aws_stack["env"],
    }


def _object(launched, key) -> bytes:
    return launched["s3"].get_object(Bucket=launched["bucket"], Key=key)["Body"].read()


def _keys(launched, prefix: str) -> list[str]:
    listed = launched["s3"].list_objects_v2(Bucket=launched["bucket"], Prefix=prefix)
    return [o["Key"] for o in listed.get("Contents", [])]


def _record(launched, run: str) -> dict:
    """The run record as the verbs read it: the trainer's run.json and the submitter's events."""
    return run_record(launched["env"], launched["bucket"], run)


def test_code_zip_and_resolved_recipe_land_under_the_run_prefix(launched):
    record = _record(launched, "ecs-1")
    assert record["target"] == "ecs" and record["state"] == "SUBMITTED"
    body = _object(launched, f"runs/ecs-1/code-{record['code_sha256'][:12]}.zip")
    assert hashlib.sha256(body).hexdigest() == record["code_sha256"]
    assert record["code"] == f"s3://{launched['bucket']}/runs/ecs-1/code-{record['code_sha256'][:12]}.zip"
    assert sorted(zipfile.ZipFile(io.BytesIO(body)).namelist()) == ["helper.py", "train.py"]
    resolved = yaml.safe_load(_object(launched, "runs/ecs-1/recipe.yaml"))
    assert resolved["env"]["HF_TOKEN"] == {"secret": f"secretsmanager:{SECRET_NAME}"}
    # the deployment's one worker group holds it: the choice is said first, then recorded and carried
    assert "[rayfleet] worker group default: 2 node(s) x g5.xlarge, $2.01/h (the only one)" in launched["result"].stdout
    assert resolved["resources"] == {"workers": 2, "cpus_per_worker": 2.0, "gpus_per_worker": 1, "group": "default"}
    assert record["group"] == "default"
    assert resolved["image"] == IMAGE and resolved["pip"] == ["einops==0.8.1"]
    assert SECRET_VALUE not in json.dumps(record)  # the record, run.json and the events both
    listed = launched["s3"].list_objects_v2(Bucket=launched["bucket"], Prefix="runs/ecs-1/")["Contents"]
    for key in [o["Key"] for o in listed if o["Key"].endswith((".json", ".yaml"))]:
        assert SECRET_VALUE.encode() not in _object(launched, key)


def test_runtask_overrides_carry_the_recipe_and_the_image_revision(launched, aws_stack):
    ecs = launched["ecs"]
    record = _record(launched, "ecs-1")
    task = ecs.describe_tasks(cluster=launched["cluster"], tasks=[record["task_arn"]])["tasks"][0]
    override = task["overrides"]["containerOverrides"][0]
    assert override["command"] == ["recipe"]
    env = {e["name"]: e["value"] for e in override["environment"]}
    assert env["RAYFLEET_RUN_NAME"] == "ecs-1" and env["RAYFLEET_CODE_URI"] == record["code"]
    assert env["RAYFLEET_STORAGE"] == f"s3://{launched['bucket']}/runs"
    assert json.loads(env["RAYFLEET_EXTRA_ARGS"]) == ["--epochs", "2"]
    carried = json.loads(env["RAYFLEET_RECIPE"])
    assert carried == yaml.safe_load(_object(launched, "runs/ecs-1/recipe.yaml"))  # the same resolved recipe
    assert SECRET_VALUE not in json.dumps(override)
    definition = ecs.describe_task_definition(taskDefinition=task["taskDefinitionArn"])["taskDefinition"]
    # Terraform's output names the deployed definition as family:revision (rayfleet-trainer:1), not an ARN
    deployed = ecs.describe_task_definition(taskDefinition=aws_stack["outputs"]["trainer_task_definition"])
    assert task["taskDefinitionArn"] == record["task_definition"] != deployed["taskDefinition"]["taskDefinitionArn"]
    assert definition["containerDefinitions"][0]["image"] == IMAGE
    assert definition["family"] == "rayfleet-trainer"  # Terraform's family: <name>-trainer


def test_trainer_submits_the_s3_code_to_the_cluster_and_records_the_result(launched, aws_stack, cluster_env):
    ecs = launched["ecs"]
    record = _record(launched, "ecs-1")
    task = ecs.describe_tasks(cluster=launched["cluster"], tasks=[record["task_arn"]])["tasks"][0]
    overrides = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    recipe = json.loads(overrides["RAYFLEET_RECIPE"])
    recipe.pop("pip")  # a per-job pip environment needs an index on the nodes; the rest is what the task gets
    recipe["resources"] = {"workers": 1, "cpus_per_worker": 1.0}  # what the local test cluster has (no GPU)
    # The job resolves its secret in its own process (rayfleet/recipes/job_entry.py): on ECS that process is in
    # the trainer container, with its task role; here it is on a node of the local cluster, told where moto is.
    recipe["env"]["AWS_ENDPOINT_URL_SECRETS_MANAGER"] = aws_stack["env"]["AWS_ENDPOINT_URL"]
    recipe["env"]["AWS_ENDPOINT_URL_S3"] = aws_stack["env"]["AWS_ENDPOINT_URL"]  # the queue: s3://<bucket>/queue
    overrides["RAYFLEET_RECIPE"] = json.dumps(recipe)
    env = {
        **aws_stack["env"],
        **cluster_env,
        **overrides,
        "AWS_ENDPOINT_URL": aws_stack["env"]["AWS_ENDPOINT_URL"],
        "RAYFLEET_DASHBOARD_URL": f"http://127.0.0.1:{DASHBOARD_PORT}",
    }  # set by rayfleet-node on ECS
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.node.driver.recipe"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"token length {len(SECRET_VALUE)}" in result.stdout and "helper says shipped" in result.stdout
    assert "['--lr', '0.1', '--epochs', '2']" in result.stdout
    done = _record(launched, "ecs-1")
    assert done["state"] == "SUCCEEDED" and done["exit_code"] == 0 and done["job_id"].startswith("rayfleet-ecs-1-")
    assert done["code_sha256"] == record["code_sha256"]  # the launcher's fields survive the trainer's update
    log = _object(launched, "runs/ecs-1/driver.log").decode()
    assert f"s3://{launched['bucket']}/runs/ecs-1" in log and "helper says shipped" in log
    assert SECRET_VALUE not in log + result.stdout + result.stderr
    assert "admitted at once: no other run in the queue" in log  # the deployment's queue, in its bucket
    left = _keys(launched, "queue/")
    assert [k for k in left if not k.startswith("queue/spent/")] == []  # and the run's entry left with it
    # what it held, priced, in the queue's ledger (its budget's spending): one item, if it cost anything
    priced = float((done.get("held") or {}).get("usd_per_hour") or 0) > 0
    assert len([k for k in left if k.startswith("queue/spent/ecs-1-")]) == int(priced), left
    # its goodput ledger, closed by the trainer's driver: from `rayfleet run`'s start, the wait for the group's
    # nodes and the queue's, at the group's price (2 x g5.xlarge); the user's script timed nothing of its own
    ledger = done["ledger"]
    seconds = {r["phase"]: r["seconds"] for r in ledger["phases"]}
    assert ledger["usd_per_hour"] == done["held"]["usd_per_hour"] == pytest.approx(2 * 1.006)
    assert {"node_start", "queue", "unaccounted"} <= set(seconds) and ledger["job_phases"] is False
    assert ledger["wall_s"] >= done[ledger_fields.NODE_WAIT] == seconds["node_start"]
    assert ledger["cost_usd"] == pytest.approx(ledger["wall_s"] / 3600 * 2 * 1.006, abs=1e-3)
    assert done["estimate"]["group"] == "default" and done["estimate"]["duration"] is None  # no past run: unknown


def test_a_code_zip_replaced_in_s3_is_refused_before_ray_sees_it(launched, aws_stack):
    """Issue 27 item 9: any job can write under runs/; the trainer runs the zip only if it has the hash
    `make run` computed and put in the RunTask overrides (which no job can change). Before, the trainer
    handed Ray the S3 URI, whatever it held by then. Nothing of Ray is needed: the refusal comes first."""
    record = _record(launched, "ecs-1")
    task = launched["ecs"].describe_tasks(cluster=launched["cluster"], tasks=[record["task_arn"]])["tasks"][0]
    overrides = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    assert overrides["RAYFLEET_CODE_SHA256"] == record["code_sha256"]
    tampered = io.BytesIO()
    with zipfile.ZipFile(tampered, "w") as z:
        z.writestr("train.py", "import os; os.system('echo owned')\n")
    name = record["code"].rsplit("/", 1)[-1]
    launched["s3"].put_object(Bucket=launched["bucket"], Key=f"runs/tampered-1/{name}", Body=tampered.getvalue())
    env = {
        **aws_stack["env"],
        **overrides,
        "RAYFLEET_RUN_NAME": "tampered-1",
        "RAYFLEET_CODE_URI": f"s3://{launched['bucket']}/runs/tampered-1/{name}",
        "RAYFLEET_DASHBOARD_URL": "http://127.0.0.1:9",  # never asked
    }
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.node.driver.recipe"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "is not the one `rayfleet run` uploaded" in line and line.endswith("refusing to run it")
    assert _record(launched, "tampered-1")["state"] == "FAILED"


def test_recipe_beyond_the_worker_instance_is_refused_before_upload(aws_stack, tmp_path):
    recipe = write_recipe(tmp_path, resources={"workers": 1, "gpus_per_worker": 4})
    result = run_recipe(aws_stack["env"], str(recipe), "--on", "ecs", "--name", "too-big", "--detach")
    assert result.returncode == 2
    assert "gpus_per_worker: 4 GPUs, but a worker of the ECS workers (g5.xlarge) has 1" in result.stderr
    listed = (
        aws_stack["server"]
        .client("s3")
        .list_objects_v2(Bucket=aws_stack["outputs"]["results_bucket"], Prefix="runs/too-big/")
    )
    assert listed.get("KeyCount", 0) == 0


def test_a_recipe_naming_a_group_the_deployment_lacks_is_refused_before_upload(aws_stack, tmp_path):
    recipe = write_recipe(tmp_path, resources={"workers": 1, "group": "huge"})
    result = run_recipe(aws_stack["env"], str(recipe), "--on", "ecs", "--name", "no-group", "--detach")
    assert result.returncode == 2, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line == (
        "error: resources.group: this deployment has no worker group 'huge'; its groups: default: 2 node(s) x g5.xlarge"
    )
    bucket = aws_stack["outputs"]["results_bucket"]
    listed = aws_stack["server"].client("s3").list_objects_v2(Bucket=bucket, Prefix="runs/no-group/")
    assert listed.get("KeyCount", 0) == 0


def test_env_secrets_are_refused_on_ecs(aws_stack, tmp_path):
    recipe = write_recipe(tmp_path, env={"HF_TOKEN": {"secret": "env:HF_TOKEN"}}, resources={"workers": 1})
    result = run_recipe(aws_stack["env"], str(recipe), "--on", "ecs", "--name", "env-secret", "--detach")
    assert result.returncode == 1 and "env: secrets exist only where `rayfleet run` runs" in result.stderr


def test_make_runs_lists_s3_runs_with_their_state(launched, aws_stack, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", "runs", "--json", "--runs-dir", str(tmp_path)],
        env=aws_stack["env"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    rows = {r["run"]: r for r in json.loads(result.stdout)}
    row = rows["ecs-1"]
    assert row["where"] == "ecs" and row["results"] == f"s3://{launched['bucket']}/runs/ecs-1/"
    record = _record(launched, "ecs-1")
    expected = record["state"]
    if expected == "SUBMITTED":  # before the trainer records the job, the task's own state is asked from ECS
        expected = launched["ecs"].describe_tasks(cluster=launched["cluster"], tasks=[record["task_arn"]])["tasks"][0][
            "lastStatus"
        ]
    assert row["state"] == expected and expected != "SUBMITTED"


class Follower:
    """`rayfleet run` on ECS without --detach, as a process, and the run's record in moto's bucket."""

    def __init__(self, aws_stack, recipe, run: str) -> None:
        self.ecs = aws_stack["server"].client("ecs")
        self.cluster, self.bucket = aws_stack["outputs"]["cluster_name"], aws_stack["outputs"]["results_bucket"]
        self.env, self.run = aws_stack["env"], run
        command = [sys.executable, "-m", "rayfleet.cli.main", "run", str(recipe), "--on=ecs", f"--name={run}"]
        self.proc = subprocess.Popen(
            command, env=aws_stack["env"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def record(self) -> dict:
        return run_record(self.env, self.bucket, self.run)

    def task(self, not_this: str | None = None) -> str:
        """The follower's new trainer task, once it has recorded it (launch, then the follower's own update)."""
        import time

        deadline = time.monotonic() + 60
        while (arn := self.record().get("task_arn")) in (None, not_this) or self.record().get("state") != "SUBMITTED":
            assert self.proc.poll() is None, self.proc.communicate()
            assert time.monotonic() < deadline, "no trainer task"
            time.sleep(0.2)
        return arn

    def stop(self, arn: str, reason: str) -> None:
        self.ecs.stop_task(cluster=self.cluster, task=arn, reason=reason)

    def end(self) -> tuple[str, str]:
        try:
            return self.proc.communicate(timeout=120)
        finally:
            self.proc.kill()


def test_a_lost_trainer_task_is_relaunched_with_the_same_overrides(aws_stack, tmp_path):
    """`retries: 1`: the first trainer task stops before the run ends (as when its instance is reclaimed); the
    follower records it LOST, relaunches a task with the same overrides (so the same run name and storage) and
    follows the second to the end its record says. Moto runs no container: the test stops the tasks and writes
    the relaunched driver's SUCCEEDED itself, so this proves the follower's decision and what the new task is
    given, not a resume. That a second submission under the same run name resumes from what the first left in
    the run's directory is test_recipe_run_on_local_cluster.py::
    test_a_failure_the_retries_name_is_resubmitted_and_resumes."""
    recipe = write_recipe(tmp_path, env={"MODE": "fast"}, resources={"workers": 1}, retries=1)
    follower = Follower(aws_stack, recipe, "lost-1")
    try:
        first = follower.task()
        follower.stop(first, "Host EC2 (instance i-0abc) terminated.")
        second = follower.task(not_this=first)
        # What the relaunched trainer's driver does at the end (rayfleet/recipes/job.py), then its task stops.
        run_record(follower.env, follower.bucket, follower.run, state="SUCCEEDED", exit_code=0, message="")
        follower.stop(second, "Essential container in task exited")
    finally:
        out, err = follower.end()
    assert follower.proc.returncode == 0, out + err
    assert "the trainer task stopped before the run ended (Host EC2 (instance i-0abc) terminated.); relaunching" in out
    tasks = follower.ecs.describe_tasks(cluster=follower.cluster, tasks=[first, second])["tasks"]
    overrides = [{e["name"]: e["value"] for e in t["overrides"]["containerOverrides"][0]["environment"]} for t in tasks]
    assert overrides[0] == overrides[1] and overrides[0]["RAYFLEET_RUN_NAME"] == "lost-1"  # the same run
    (lost,) = follower.record()["attempts"]
    assert lost["task_arn"] == first and lost["state"] == "LOST" and "terminated" in lost["why"]


def test_a_lost_trainer_task_beyond_the_retries_fails_the_run(aws_stack, tmp_path):
    recipe = write_recipe(tmp_path, env={"MODE": "fast"}, resources={"workers": 1})  # retries: 0
    follower = Follower(aws_stack, recipe, "lost-2")
    try:
        follower.stop(follower.task(), "Task stopped by user")
    finally:
        out, err = follower.end()
    assert follower.proc.returncode != 0 and "relaunching" not in out
    assert "error: run lost-2: the trainer task stopped before the run ended: Task stopped by user" in err
    final = follower.record()
    assert final["state"] == "LOST" and [a["state"] for a in final["attempts"]] == ["LOST"]


def test_a_failed_record_of_a_lost_head_relaunches_the_trainer_and_one_of_a_sigterm_does_not(aws_stack, tmp_path):
    """The follower's decision on the record a driver leaves when it exits: FAILED "the submitter stopped
    (ConnectionError) ..." (its head went away under it: rayfleet/recipes/job.py) is a lost trainer, relaunched;
    FAILED "the submitter stopped (SIGTERM) ..." (rayfleet deploy stop) is the run's end. The test writes each record in
    the driver's place and stops the task (moto runs no container): no head is replaced and nothing resumes
    here. A head replaced under a running job is test_rehearsal.py::test_a_head_killed_mid_run_is_replaced_on_
    its_store_and_the_run_goes_on; a second submission under the same run name resuming from what the first left,
    test_recipe_run_on_local_cluster.py::test_a_failure_the_retries_name_is_resubmitted_and_resumes."""
    recipe = write_recipe(tmp_path, env={"MODE": "fast"}, resources={"workers": 1}, retries=2)
    follower = Follower(aws_stack, recipe, "headless")

    def driver_ends(arn: str, message: str, reason: str) -> None:
        run_record(follower.env, follower.bucket, follower.run, state="FAILED", exit_code=1, message=message)
        follower.stop(arn, reason)

    try:
        first = follower.task()
        driver_ends(first, "the submitter stopped (ConnectionError) before the job ended", "Essential container exited")
        second = follower.task(not_this=first)
        driver_ends(second, "the submitter stopped (SIGTERM) before the job ended", "Task stopped by user")
    finally:
        out, err = follower.end()
    assert follower.proc.returncode == 1 and out.count("relaunching") == 1, out + err
    assert "the trainer task stopped before the run ended (the submitter stopped (ConnectionError)" in out
    assert [a["state"] for a in follower.record()["attempts"]] == ["LOST"]


def test_the_built_in_ddp_recipe_stages_its_data_for_the_trainer(aws_stack, small_dataset):
    """recipes/ddp.yaml with no job arguments on ECS: its data (the generated set, where `make data` would
    write it) is staged once to the bucket and the trainer task gets its S3 URL as RAYFLEET_DATA, which the
    recipe passes on as data_dir; a second run stages nothing. (The job reading it is the rehearsal's test.)"""
    env, bucket = aws_stack["env"], aws_stack["outputs"]["results_bucket"]
    s3, ecs = aws_stack["server"].client("s3"), aws_stack["server"].client("ecs")
    first = run_recipe(
        env,
        "recipes/ddp.yaml",
        "--on",
        "ecs",
        "--name",
        "ddp-data-1",
        "--set",
        f"data={small_dataset}",
        "--detach",
    )
    assert first.returncode == 0, first.stderr
    assert f"[rayfleet] staging data {small_dataset} (" in first.stdout
    url = next(line.rsplit(" ", 1)[-1] for line in first.stdout.splitlines() if "the job reads s3://" in line)
    prefix = url.removeprefix(f"s3://{bucket}/")
    staged = {o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]}
    assert (
        f"{prefix}/FashionMNIST/raw/train-images-idx3-ubyte" in staged and f"{prefix}/.rayfleet-staged.json" in staged
    )
    record = run_record(env, bucket, "ddp-data-1")
    task = ecs.describe_tasks(cluster=aws_stack["outputs"]["cluster_name"], tasks=[record["task_arn"]])["tasks"][0]
    overrides = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    assert overrides["RAYFLEET_DATA"] == url
    assert "data_dir=${RAYFLEET_DATA}" in json.loads(overrides["RAYFLEET_RECIPE"])["args"]
    code = zipfile.ZipFile(
        io.BytesIO(s3.get_object(Bucket=bucket, Key=record["code"].removeprefix(f"s3://{bucket}/"))["Body"].read())
    )
    assert not [n for n in code.namelist() if n.startswith("data/")]  # data travels staged, never in the code zip

    second = run_recipe(
        env,
        "recipes/ddp.yaml",
        "--on",
        "ecs",
        "--name",
        "ddp-data-2",
        "--set",
        f"data={small_dataset}",
        "--detach",
    )
    assert second.returncode == 0, second.stderr
    assert f"already staged at {url}" in second.stdout and "staging data" not in second.stdout


def test_a_recipe_needing_more_worker_nodes_than_the_group_is_refused_before_upload(aws_stack, tmp_path):
    """The default deployment's worker group holds 2 x g5.xlarge (1 GPU each): 3 one-GPU workers never fit."""
    synthetic.generate(tmp_path / "data", train=10, test=10)  # inside the recipe's folder, where data: must be
    recipe = write_recipe(tmp_path, resources={"workers": 3, "gpus_per_worker": 1}, data="data")
    result = run_recipe(aws_stack["env"], str(recipe), "--on", "ecs", "--name", "too-many", "--detach")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "3 workers do not fit the ECS workers (g5.xlarge): 2 node(s) of 1 hold 2 of this size" in result.stderr
    s3, bucket = aws_stack["server"].client("s3"), aws_stack["outputs"]["results_bucket"]
    assert s3.list_objects_v2(Bucket=bucket, Prefix="runs/too-many/").get("KeyCount", 0) == 0
    assert "staging" not in result.stdout and "packaged" not in result.stdout  # neither data nor code went up


def test_the_built_in_fsdp_recipe_stages_its_corpus_and_reads_it_from_s3(aws_stack, tmp_path, monkeypatch):
    """recipes/fsdp.yaml on ECS with no job arguments: its corpus folder (data/text, `make text-data`) is
    staged, and the arg it resolves to, data=s3://.../tiny_shakespeare.txt, is what the FSDP job's reader
    reads. Sized down with --set to the harness's one group (2 x g5.xlarge); its own shape is the default
    deployment's fsdp group."""
    corpus = tmp_path / "text"
    corpus.mkdir()
    (corpus / "tiny_shakespeare.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    env, bucket = aws_stack["env"], aws_stack["outputs"]["results_bucket"]
    sets = ["--set", f"data={corpus}", "--set", "resources.workers=2", "--set", "resources.cpus_per_worker=4"]
    result = run_recipe(env, "recipes/fsdp.yaml", "--on", "ecs", "--name", "fsdp-data-1", *sets, "--detach")
    assert result.returncode == 0, result.stderr
    record = run_record(env, bucket, "fsdp-data-1")
    ecs = aws_stack["server"].client("ecs")
    task = ecs.describe_tasks(cluster=aws_stack["outputs"]["cluster_name"], tasks=[record["task_arn"]])["tasks"][0]
    overrides = {e["name"]: e["value"] for e in task["overrides"]["containerOverrides"][0]["environment"]}
    assert overrides["RAYFLEET_DATA"].startswith(f"s3://{bucket}/staged/")
    assert "data=${RAYFLEET_DATA}/tiny_shakespeare.txt" in json.loads(overrides["RAYFLEET_RECIPE"])["args"]
    # The reader as on a rank: the task role's credentials (IAM enforced), not the operator's that staged it.
    for key, value in {"AWS_ENDPOINT_URL": env["AWS_ENDPOINT_URL"], **aws_stack["roles"]["task"]}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", env["AWS_DEFAULT_REGION"])
    assert read_text(f"{overrides['RAYFLEET_DATA']}/tiny_shakespeare.txt").startswith("First Citizen:")
