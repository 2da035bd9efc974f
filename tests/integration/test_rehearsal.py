"""`rayfleet rehearse up` end to end: the task definitions Terraform renders, run with podman on this host against
moto, used through the laptop verbs as on ECS.

One rehearsal for the module (the four images of tests/images, tag `test`), its moto enforcing IAM as the
moto tier does (each container its task role, the verbs the operator, the tests' own look the inspector), first
on the default deployment (no GCS store), then with `gcs_store` switched on in place
(tools/rehearsal/reapply.py, as `make deploy` with other variables): the cluster forms with token auth through
the secret; each container acts as its task definition's role; a DDP recipe run goes through the trainer image
to SUCCEEDED with checkpoints in S3 and `status` reads it back, while each worker's gpu-metrics sidecar sees it
training on its node through the task's current-run volume (and nothing once it ends); the control task's
ray-control container puts Ray's view (nodes, resources, jobs) where `status` prints it; a worker container
stopped mid-run is replaced by the service and the job resumes from its last checkpoint; without a store, the
head container killed is replaced and the same worker containers resolve its name again and rejoin; a worker
started with another token is kept out, and `rayfleet token rotate` brings every node back; then, on the
deployment's GCS store (a TLS redis-server stand-in), the head container killed mid-run is replaced with a new
IP and the run goes on; `make stop` twice; Ctrl-C leaves nothing. Before it, bad input: one line each, nothing
left running.

Skipped without podman unless RAYFLEET_REQUIRE_IMAGES=1 (then failed), as tests/images.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest

from rayfleet.recipes import jobs_api, ray_faults
from tests.images.helpers import wait_for_background_build
from tests.integration import helpers
from tests.integration.helpers import REPO
from tests.integration.rehearsal_helpers import (
    LABEL,
    TAG,
    Rehearsal,
    alive_node_ips,
    container_ip,
    containers,
    ensure_images,
    left_behind,
    nodes_seen,
    podman,
    ray_nodes_alive,
    rehearsal_cli,
    require_podman,
    run_verb,
    start_verb,
)
from tools.rehearsal.host import engine_ulimits

pytestmark = pytest.mark.integration
SMALL = ["epochs=2", "train_subset=600", "test_subset=200"]
ONE_GROUP_WORKERS = 'default = { instance_types = ["g5.xlarge"], min = 2, max = 2 }'  # infra/one-group.tfvars'
MODELS_GROUP = f"worker_groups = {{\n  {ONE_GROUP_WORKERS.removesuffix(' }')}, models = true }}\n}}\n"
NEVER_REACHED = 100  # epochs: the stopped-worker run ends by a stop request once it has resumed
STOP_REASON = "asked by the test once the run had resumed"
CURRENT_RUNS = (
    "import json; from monitoring.current_run import current_runs; print(json.dumps(current_runs('/run/rayfleet')))"
)


@pytest.fixture(scope="module")
def images(request, tmp_path_factory):
    require_podman()
    wait_for_background_build(request.config)  # started by tests/conftest.py when collected
    ensure_images(tmp_path_factory.mktemp("images"))


def labelled() -> set[str]:
    """Every podman object any rehearsal labelled (containers, pods, networks)."""
    names = set(podman("ps", "-a", "--filter", f"label={LABEL}", "--format", "{{.Names}}").stdout.split())
    names |= set(podman("pod", "ps", "--filter", f"label={LABEL}", "--format", "{{.Name}}").stdout.split())
    names |= set(podman("network", "ls", "--filter", f"label={LABEL}", "--format", "{{.Name}}").stdout.split())
    return names


def has_gpu() -> bool:
    return any(Path("/dev").glob("nvidia[0-9]*"))


def processes(text: str) -> list[str]:
    """Command lines of this machine's processes that mention `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            command = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in command:
            found.append(command)
    return found


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


# -- bad input: one clear line, nothing left ------------------------------------------------------------


def test_no_podman_is_one_line(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # a PATH without podman
    result = rehearsal_cli("up", "--tag", TAG, "--state-dir", str(tmp_path / "state"), env=env, timeout=120)
    assert result.returncode == 1
    assert error_lines(result) == [error_lines(result)[0]]
    assert error_lines(result)[0].startswith("error: podman is not installed")


def test_images_not_built_names_make_build(images, tmp_path):
    before = labelled()
    result = rehearsal_cli("up", "--tag", "no-such-build", "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = error_lines(result)
    assert line.startswith("error: images not built: localhost/rayfleet/gpu-metrics:no-such-build")
    assert "`make build IMAGE_TAG=no-such-build`" in line
    assert labelled() == before


def test_port_taken_is_one_line(images, tmp_path):
    before = labelled()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = rehearsal_cli("up", "--tag", TAG, "--port", str(port), "--state-dir", str(tmp_path / "state"))
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = error_lines(result)
    assert line.startswith(f"error: port {port} is already taken")
    assert labelled() == before
    assert not (tmp_path / "state" / "state.json").exists()


def test_moto_unreachable_from_containers_is_one_line(images, tmp_path):
    before = labelled()
    result = rehearsal_cli(
        "up", "--tag", TAG, "--container-endpoint", "http://192.0.2.1:9", "--state-dir", str(tmp_path / "state")
    )
    assert result.returncode == 1, result.stdout + result.stderr
    (line,) = error_lines(result)
    assert line.startswith("error: moto at http://192.0.2.1:9 is not reachable from the containers")
    assert "stopped: 0 task(s), 0 container(s)" in result.stdout
    assert labelled() == before


def test_down_with_nothing_running_is_safe(tmp_path):
    for _ in range(2):
        result = rehearsal_cli("down", "--state-dir", str(tmp_path / "state"))
        assert result.returncode == 0, result.stderr
        assert "nothing to stop" in result.stdout


# -- one rehearsal, used as ECS is used ---------------------------------------------------------------


def data_of(rehearsal) -> list[str]:
    """The built-in recipe's data: pointed at the set this module generated (a fresh clone has no data/);
    `make run` stages it to the bucket, as on ECS."""
    return ["--set", f"data={rehearsal.data}"]


@pytest.fixture(scope="module")
def rehearsal(images, tmp_path_factory):
    scratch = tmp_path_factory.mktemp("rehearsal")
    data = scratch / "data"
    # As many images as the runs here read (SMALL's subsets): every worker task downloads the set from moto.
    subsets = dict(item.split("=") for item in SMALL)
    synthetic = [sys.executable, "-m", "rayfleet.train.data.synthetic", str(data)]
    synthetic += ["--train", subsets["train_subset"], "--test", subsets["test_subset"]]
    subprocess.run(synthetic, cwd=REPO, check=True, timeout=300)
    started = time.monotonic()
    # The default deployment (no GCS store) first; the head-kill-on-store test switches the store on in place
    # (off by default: it bills every hour; its stand-in is tools/rehearsal/store.py).
    # The harness's one group, with models = true: its workers run ray-worker:test-models (the tiny GPT-NeoX
    # preloaded), the trainer the plain trainer image. Each var file below carries it (a later file's
    # worker_groups replaces the whole map), so switching the store on changes nothing else.
    models_vars = scratch / "models.tfvars"
    models_vars.write_text(MODELS_GROUP)
    running = Rehearsal(scratch / "state", "--var-file", str(models_vars))  # nothing of this host mounted
    running.store_vars = scratch / "store.tfvars"
    running.store_vars.write_text(MODELS_GROUP + "gcs_store = { enabled = true }\n")
    running.data = data
    try:
        running.wait_for("cluster formed", timeout=600)
        running.wait_for("Ctrl-C (or `rayfleet rehearse down`)", timeout=60)
        running.started_s = time.monotonic() - started
        running.rid = running.state["rid"]
        yield running
    finally:
        running.interrupt()
        running.kill()
        rehearsal_cli("down", "--state-dir", str(scratch / "state"))  # a safety net: the test below checks


@pytest.fixture(scope="module")
def aws(rehearsal):
    """The verbs' environment (the operator's keys: IAM is enforced) and `client`, the test's own look at the
    rehearsal's AWS as the all-allowed inspector (what the console shows the account's root), never a product
    call."""
    env = rehearsal.env()
    inspector = rehearsal.env("inspector")
    outputs = {k: v["value"] for k, v in json.loads(Path(env["RAYFLEET_OUTPUTS"]).read_text()).items()}

    @functools.cache  # making a client costs 0.5-1 s of CPU, and the tests poll through these
    def client(service):
        return boto3.client(
            service,
            endpoint_url=inspector["AWS_ENDPOINT_URL"],
            region_name=inspector["AWS_DEFAULT_REGION"],
            aws_access_key_id=inspector["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=inspector["AWS_SECRET_ACCESS_KEY"],
        )

    return {"env": env, "outputs": outputs, "client": client}


def head_container(rid: str) -> str:
    (head,) = containers(rid, "-ray-head")
    return head


def run_record(aws, run: str) -> dict:
    """The run record as the verbs read it (the trainer's run.json and the submitter's events)."""
    return helpers.run_record(aws["env"], aws["outputs"]["results_bucket"], run)


def metrics(aws, run: str) -> list[dict]:
    key = f"runs/{run}/metrics.jsonl"
    body = aws["client"]("s3").get_object(Bucket=aws["outputs"]["results_bucket"], Key=key)["Body"]
    return [json.loads(line) for line in body.read().decode().splitlines() if line.strip()]


def keys(aws, prefix: str) -> list[str]:
    listing = aws["client"]("s3").list_objects_v2(Bucket=aws["outputs"]["results_bucket"], Prefix=prefix)
    return [o["Key"] for o in listing.get("Contents", [])]


def log_text(aws, component: str) -> str:
    logs = aws["client"]("logs")
    group = f"/rayfleet/{aws['outputs']['cluster_name']}/{component}"
    events = logs.filter_log_events(logGroupName=group)["events"]
    return "\n".join(e["message"] for e in events)


def wait_for_log(aws, component: str, text: str, timeout_s: float = 20) -> str:
    """The component's CloudWatch Logs once `text` is in them (the shipper sends within about a second)."""
    deadline = time.monotonic() + timeout_s
    while text not in (out := log_text(aws, component)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return out


def health_of(container: str) -> str | None:
    """The container's health check status as podman reports it (starting, healthy, unhealthy)."""
    return json.loads(podman("inspect", "--format", "{{json .State.Health}}", container).stdout or "{}").get("Status")


def test_cluster_forms_as_the_task_definitions_say(rehearsal, aws):
    out = rehearsal.output
    print(f"rehearsal ready in {rehearsal.started_s:.0f}s")
    adapted = [line for line in out.splitlines() if "adapted to this host" in line]
    assert len(adapted) == 1, out  # every change to the task definitions, in one line
    if not has_gpu():
        assert "GPU resourceRequirements dropped and RAYFLEET_NUM_GPUS 1→0" in adapted[0]
        assert "gpu-metrics runs --idle-without-gpu" in adapted[0]
    assert "Terraform's offline apply of infra/" in out
    rid = rehearsal.rid
    head = head_container(rid)
    workers = containers(rid, "-ray-worker")
    assert len(workers) == 2 and len(containers(rid, "-gpu-metrics")) == 2
    # The token: resolved from Secrets Manager by the secret's ARN into the environment (as the ECS agent does).
    secret = aws["client"]("secretsmanager").get_secret_value(SecretId=aws["outputs"]["ray_token_secret_arn"])
    token = secret["SecretString"]
    assert podman("exec", head, "printenv", "RAY_AUTH_TOKEN").stdout.strip() == token
    # Cloud Map: the head's name resolves to the head task, from a worker.
    name = aws["outputs"]["head_dns_name"]
    resolved = podman("exec", workers[0], "getent", "hosts", name).stdout.split()
    assert resolved and resolved[0] in podman("exec", head, "hostname", "-I").stdout.split(), resolved
    # Shared memory, ulimits, health check.
    shm_mib = int(podman("exec", workers[0], "df", "-m", "--output=size", "/dev/shm").stdout.split()[-1])
    assert shm_mib > 256  # the task definition's sharedMemorySize (scaled), not podman's 64 MB default
    nofile = int(podman("exec", workers[0], "sh", "-c", "ulimit -n").stdout.strip())
    assert nofile == min(65536, engine_ulimits().get("nofile", (65536, 65536))[1])
    # The health check: ready means Ray's nodes are up, which can come before the check's first pass.
    deadline = time.monotonic() + 90
    while (health := health_of(head)) != "healthy" and time.monotonic() < deadline:
        time.sleep(2)
    assert health == "healthy", health
    # Each container's output in CloudWatch Logs, as the awslogs driver names it.
    assert "is using /tmp/ray instead of /dev/shm" not in log_text(aws, "ray-worker")
    assert has_gpu() or "no_gpu_idle" in wait_for_log(aws, "gpu-metrics", "no_gpu_idle")
    assert ray_nodes_alive(head) == 3


AS_WHOM = """
import json, sys
import boto3, botocore.exceptions
out = {"arn": boto3.client("sts").get_caller_identity()["Arn"]}
for key in sys.argv[2:]:
    try:
        boto3.client("s3").put_object(Bucket=sys.argv[1], Key=key, Body=b"probe")
        out[key] = "ok"
    except botocore.exceptions.ClientError as exc:
        out[key] = exc.response["Error"]["Code"]
print(json.dumps(out))
"""


def test_each_container_acts_as_its_task_role_under_enforced_iam(rehearsal, aws):
    """Issue 54: the rehearsal's moto enforces IAM as the moto tier does. Each container holds its task
    definition's task role, as ECS's credentials endpoint hands it (the sidecar its task's), not shared test
    keys: a job's role writes runs/ and is refused staged/ (the deployer's), the control task is the control
    role; and the laptop verbs' keys are the operator's."""
    ecs, out = aws["client"]("ecs"), aws["outputs"]
    roles = {}
    names = {"worker": out["worker_groups"]["default"]["service_name"], "control": out["control_service_name"]}
    for key, name in names.items():
        (service,) = ecs.describe_services(cluster=out["cluster_name"], services=[name])["services"]
        definition = ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]
        roles[key] = definition["taskRoleArn"].rsplit("/", 1)[-1]
    assert roles["worker"] != roles["control"]
    bucket = out["results_bucket"]
    rid = rehearsal.rid
    probes = {
        "ray-worker": (containers(rid, "-ray-worker")[0], roles["worker"]),
        "gpu-metrics": (containers(rid, "-gpu-metrics")[0], roles["worker"]),
        "ray-control": (containers(rid, "-ray-control")[0], roles["control"]),
    }
    for name, (container, role) in probes.items():
        keys = ["runs/iam-probe/x", "staged/iam-probe/x"] if name == "ray-worker" else []
        result = podman("exec", container, "python", "-c", AS_WHOM, bucket, *keys, timeout=120)
        assert result.returncode == 0, (name, result.stderr)
        seen = json.loads(result.stdout.strip().splitlines()[-1])
        assert f":assumed-role/{role}/" in seen["arn"], (name, seen)
        if keys:
            assert seen["runs/iam-probe/x"] == "ok" and seen["staged/iam-probe/x"] == "AccessDenied", seen
    sts = boto3.client(
        "sts",
        endpoint_url=aws["env"]["AWS_ENDPOINT_URL"],
        region_name=aws["env"]["AWS_DEFAULT_REGION"],
        aws_access_key_id=aws["env"]["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=aws["env"]["AWS_SECRET_ACCESS_KEY"],
    )
    assert ":user/" in sts.get_caller_identity()["Arn"] and "inspector" not in sts.get_caller_identity()["Arn"]


def test_moto_is_closed_to_other_hosts_and_the_agent_runs_only_rendered_definitions(rehearsal, aws):
    """Issue 27 item 3, on the running rehearsal: its moto refuses a connection to this host's outward
    address (it listened on 0.0.0.0), and a definition registered by anyone who reaches moto, RunTask'd as
    rayfleet's launcher does (startedBy=rayfleet), with the host's / mounted, is stopped unrun."""
    port = rehearsal.state["moto_port"]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.123", 9))
        outward = probe.getsockname()[0]
    with pytest.raises(ConnectionRefusedError), socket.create_connection((outward, port), timeout=5):
        pass
    ecs = aws["client"]("ecs")
    trainer = ecs.describe_task_definition(taskDefinition=aws["outputs"]["trainer_task_definition"])["taskDefinition"]
    container = {**trainer["containerDefinitions"][0], "command": ["sh", "-c", "touch /host/tmp/owned"]}
    container["mountPoints"] = [{"sourceVolume": "root", "containerPath": "/host"}]
    evil = ecs.register_task_definition(
        family=trainer["family"],
        containerDefinitions=[container],
        volumes=[{"name": "root", "host": {"sourcePath": "/"}}],
        networkMode=trainer["networkMode"],
    )["taskDefinition"]["taskDefinitionArn"]
    task = ecs.run_task(
        cluster=aws["outputs"]["cluster_name"],
        taskDefinition=evil,
        startedBy="rayfleet",
        networkConfiguration={
            "awsvpcConfiguration": {
                "subnets": list(aws["outputs"]["private_subnet_ids"]),
                "securityGroups": [aws["outputs"]["task_security_group_id"]],
            }
        },
    )["tasks"][0]["taskArn"]
    rehearsal.wait_for(f"task {task.rsplit('/', 1)[-1][:8]} refused: not a task definition", timeout=30)
    (described,) = ecs.describe_tasks(cluster=aws["outputs"]["cluster_name"], tasks=[task])["tasks"]
    assert (
        described["desiredStatus"] == "STOPPED" and "differs from the rendered definition" in described["stoppedReason"]
    )
    assert not Path("/tmp/owned").exists()
    assert not [c for c in containers(rehearsal.rid, "-trainer-") if task.rsplit("/", 1)[-1][:8] in c]


def sidecars_that_saw(run: str, sidecars: list[str], follow: subprocess.Popen) -> set[str]:
    """Poll each gpu-metrics sidecar's view of the current runs until every one has seen `run` or the run ended."""
    seen: set[str] = set()
    while seen != set(sidecars) and follow.poll() is None:
        for sidecar in set(sidecars) - seen:
            result = podman("exec", sidecar, "python", "-c", CURRENT_RUNS, timeout=60)
            assert result.returncode == 0, result.stderr
            if json.loads(result.stdout) == [run]:
                seen.add(sidecar)
        time.sleep(4)  # each look is a `podman exec` of Python in every sidecar: CPU the run needs
    return seen


def ended_logs(aws, run: str, count: int, timeout_s: float = 30) -> str:
    """The sidecars' log once `count` of them have logged that `run` ended (the idle sidecar polls every 10 s)."""
    ended = f'"runs": [], "previous": ["{run}"]'
    deadline = time.monotonic() + timeout_s
    while (out := log_text(aws, "gpu-metrics")).count(ended) < count and time.monotonic() < deadline:
        time.sleep(1)
    return out


def training_worker(rid: str) -> str:
    """A worker container that hosts one of the run's Ray Train workers (Ray may pack both onto one node: the
    other worker container then holds nothing of the run). `podman top` reads the processes from the host."""
    workers = containers(rid, "-ray-worker")
    for name in workers:
        if "RayTrainWorker" in podman("top", name, "args", timeout=60).stdout:
            return name
    return workers[0]


def test_ddp_recipe_through_the_trainer_survives_a_stopped_worker_and_status_reads_it_back(rehearsal, aws, tmp_path):
    """A DDP recipe through the trainer task to SUCCEEDED, read back by `status`, with a worker container
    stopped after the first checkpoint (as on a Spot interruption): the service replaces the task and the job
    resumes from its last checkpoint. The run has more epochs than it will ever reach: only once a resumed
    epoch is in its rows does the test ask it to stop (the stop request a budget uses, core/stop_request.py), so
    it cannot finish every epoch inside the stopped worker's grace period, however fast the machine. While it
    trains, each worker task's gpu-metrics container sees the run's name through the task's current-run volume
    (written by the Ray Train workers in ray-worker, read by the sidecar's own reader in its own container,
    read-only), and nothing once it has ended (issue 15 item 11). On this host the sidecars idle without GPUs, so
    they publish no metrics, but they still follow the runs and log each change; the RunName rollup itself is
    shown with a stand-in NVML (tests/integration/test_sidecar_to_cloudwatch.py)."""
    run, bucket = "rehearsal-ddp", aws["outputs"]["results_bucket"]
    sidecars = containers(rehearsal.rid, "-gpu-metrics")
    assert len(sidecars) == 2
    started = time.monotonic()
    args = ["recipes/ddp.yaml", "--on", "ecs", "--name", run, *data_of(rehearsal), "--", f"epochs={NEVER_REACHED}"]
    with open(tmp_path / "out", "w") as out:
        follow = start_verb(aws["env"], "rayfleet.cli.main", "run", *args, *SMALL[1:], out=out)
    try:
        seen = sidecars_that_saw(run, sidecars, follow)
        deadline = time.monotonic() + 300
        while f"runs/{run}/checkpoint_000001/state.pt" not in keys(aws, f"runs/{run}/"):
            assert time.monotonic() < deadline and follow.poll() is None, "no first checkpoint"
            time.sleep(0.5)
        victim = training_worker(rehearsal.rid)
        podman("stop", "-t", "10", victim, timeout=120)  # the container stops, as on a Spot interruption
        deadline = time.monotonic() + 900
        while follow.poll() is None:
            assert time.monotonic() < deadline, (tmp_path / "out").read_text()[-8000:]
            if any(r["attempt"] >= 1 for r in metrics(aws, run)):  # a resumed attempt has trained an epoch
                helpers.keep_asking_to_stop(aws["env"], bucket, run, STOP_REASON)
            time.sleep(1)
    finally:
        if follow.poll() is None:
            follow.kill()
    output = (tmp_path / "out").read_text()
    print(f"DDP run through the trainer, a worker replaced: {time.monotonic() - started:.0f}s")
    assert follow.returncode == 0, output[-8000:]
    # No data/ is mounted in any container: the recipe's data went up to the bucket and the workers read it there.
    assert re.search(r"\[rayfleet\] (staging data|data .* already staged at s3://)", output), output[:3000]
    assert seen == set(sidecars), f"the run was seen by {seen} only"
    assert f"run {run} stopped early: {STOP_REASON}" in output  # the trainer's log, followed from CloudWatch Logs
    assert "[rayfleet] trainer task is STOPPED" in output
    resumed = re.search(rf"resuming {run} from the checkpoint of epoch (\d+) \(attempt 1\)", output)
    assert resumed, output[-8000:]
    record = run_record(aws, run)
    assert record["state"] == "SUCCEEDED" and record["exit_code"] == 0 and record["target"] == "ecs"
    # Ray Train restarted its workers within the one submission; one more submission only for the Ray fault
    # rayfleet/recipes/ray_faults.py names (the controller's GCS timeout removing the lost node's placement group).
    attempts = record["attempts"]
    assert len(attempts) in (1, 2), attempts
    assert len(attempts) == 1 or attempts[1]["reason"].startswith(ray_faults.CONTROLLER_FAULT), attempts
    rows = metrics(aws, run)
    # the epoch count continues, each epoch once, and the run ended by the request, not by its epochs
    assert [r["epoch"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) < NEVER_REACHED, rows
    assert all(r["attempt"] == 1 for r in rows if r["epoch"] > int(resumed.group(1)))
    # It read the newest complete checkpoint, the one the line names (rayfleet/train/checkpoint/resume.py).
    read = f"checkpoint_{int(resumed.group(1)):06d}"
    assert {r["resumed_from"] for r in rows if r["attempt"] == 1} == {read}, rows
    # ... and the record says so (the job's own event; retention has deleted that checkpoint since, by design).
    assert len(attempts) == 2 or attempts[0].get("resumed_from") == read, attempts
    # The service replaced the stopped task; ECS's record of the stopped one says why.
    why = f"stopping task worker {victim.split('-worker-')[1][:8]}: Essential container in task exited"
    assert why in rehearsal.output
    now, workers = containers(rehearsal.rid, "-gpu-metrics"), containers(rehearsal.rid, "-ray-worker")
    tasks = "\n".join(line for line in rehearsal.lines if "task " in line)  # the agent's starts and stops, if not
    assert len(now) == 2 and len(workers) == 2, f"{now} {workers} {containers(rehearsal.rid, running=False)}\n{tasks}"
    for sidecar in now:  # the run ended: its workers removed their files
        assert json.loads(podman("exec", sidecar, "python", "-c", CURRENT_RUNS, timeout=60).stdout) == []
        assert podman("exec", sidecar, "touch", "/run/rayfleet/x", timeout=60).returncode != 0  # read-only there
    # Each live sidecar logged the run's start and its end (the stopped one's task went with its log's end).
    logged = ended_logs(aws, run, count=2)
    assert logged.count(f'"event": "runs_changed", "runs": ["{run}"]') >= 2, logged[-3000:]
    assert logged.count(f'"runs": [], "previous": ["{run}"]') >= 2, logged[-3000:]
    status = run_verb(aws["env"], "rayfleet.cli.main", "status", "--json", timeout=120)
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    services = {s["name"]: (s["desired"], s["running"]) for s in shown["services"]}
    assert services == {
        aws["outputs"]["head_service_name"]: (1, 1),
        aws["outputs"]["worker_groups"]["default"]["service_name"]: (2, 2),
        aws["outputs"]["control_service_name"]: (1, 1),  # listed beside them (issue 54: every token holder)
    }
    roles = sorted(t["role"] for t in shown["tasks"])
    assert roles == ["control", "head", "worker", "worker"]  # the trainer task has stopped, the stopped worker's too
    assert [t["health"] for t in shown["tasks"] if t["role"] == "head"] == ["HEALTHY"]  # its health check
    runs = {r["run"]: r for r in shown["runs"]}
    assert runs[run]["state"] == "SUCCEEDED"
    human = run_verb(aws["env"], "rayfleet.cli.main", "status", timeout=120)
    assert human.returncode == 0 and aws["outputs"]["worker_groups"]["default"]["service_name"] in human.stdout


def ray_snapshot(aws) -> dict | None:
    s3 = aws["client"]("s3")
    try:
        body = s3.get_object(Bucket=aws["outputs"]["results_bucket"], Key="cluster/ray-status.json")["Body"]
    except s3.exceptions.NoSuchKey:
        return None
    return json.loads(body.read())


def test_status_shows_rays_view_from_the_heads_snapshot(rehearsal, aws):
    """issue 15 item 10: the control task's ray-control container (the head image, head_snapshot as its entry
    point) writes Ray's view to s3://<bucket>/cluster/ray-status.json, and `make status` prints it: the
    nodes, their resources and the jobs, here the DDP run of the test above. Issue 27: it is a task of its
    own (another pod than the head's, reaching the dashboard by the head's Cloud Map name), and the
    containers run as the task definitions lock them down: uid 1000, read-only root, no capabilities."""
    (control,) = containers(rehearsal.rid, "-ray-control")
    head = head_container(rehearsal.rid)
    pods = [podman("inspect", "--format", "{{.Pod}}", c).stdout.strip() for c in (control, head)]
    assert pods[0] != pods[1], pods
    for container in (control, head):
        assert podman("exec", container, "id", "-u").stdout.strip() == "1000"
        assert podman("exec", container, "touch", "/opt/x").returncode != 0  # read-only root
        assert podman("exec", container, "touch", "/tmp/x").returncode == 0  # its task volume
        status = podman("exec", container, "grep", "-E", "^(CapEff|NoNewPrivs)", "/proc/self/status").stdout
        assert "0000000000000000" in status and "NoNewPrivs:\t1" in status, status
    # The test above saw the trainer task stop, its Ray node with it: wait for a snapshot written after that
    # (it writes every 30 s), so the trainer's node is not in it.
    since = datetime.now(UTC).isoformat(timespec="seconds")
    deadline = time.monotonic() + 120
    while True:
        snap = ray_snapshot(aws)
        jobs = [j for j in (snap or {}).get("jobs", []) if (j.get("submission_id") or "").startswith("rayfleet-")]
        ddp = [j for j in jobs if j["submission_id"].startswith("rayfleet-rehearsal-ddp-")]
        # Every job has ended and the DDP run's newest (the snapshot lists the newest first) succeeded; an
        # earlier one may have failed on a fault of Ray's, which rayfleet/recipes/ray_faults.py submits again.
        ended = all(j["status"] in ("SUCCEEDED", "FAILED", "STOPPED") for j in jobs)
        if snap and snap["taken_at"] > since and ddp and ended and ddp[0]["status"] == "SUCCEEDED":
            break
        assert time.monotonic() < deadline, (snap, log_text(aws, "ray-head")[-3000:])
        time.sleep(3)
    alive = [n for n in snap["nodes"] if n["alive"]]
    assert len(alive) == 3 and [n["head"] for n in alive].count(True) == 1  # the head and both workers
    workers = [n for n in alive if not n["head"]]
    assert snap["total"]["CPU"] == sum(n["resources"]["CPU"] for n in workers) >= 2  # the head offers none
    assert snap["available"]["CPU"] == snap["total"]["CPU"]  # nothing runs now
    shown = run_verb(aws["env"], "rayfleet.cli.main", "status", "--json", timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["ray"]["taken_at"] >= snap["taken_at"]
    human = run_verb(aws["env"], "rayfleet.cli.main", "status", timeout=120)
    assert human.returncode == 0, human.stderr
    assert "3 nodes alive (1 head, 2 workers)" in human.stdout, human.stdout
    assert f"CPU {snap['total']['CPU']:g}/{snap['total']['CPU']:g} free" in human.stdout, human.stdout
    assert "rayfleet-rehearsal-ddp-" in human.stdout and "SUCCEEDED" in human.stdout, human.stdout
    assert "no snapshot" not in human.stdout
    assert "head-snapshot: first snapshot written" in log_text(aws, "ray-control")  # its own log group


def test_a_torchrun_recipe_runs_its_script_on_the_worker_tasks(rehearsal, aws):
    """issue 16: a `launcher: torchrun` recipe on ECS. The trainer task is the job's driver; it places one
    bundle per worker task and starts one torchrun in each ray-worker container (the worker image's
    rayfleet/node/driver/launcher.py), which runs the unmodified example with gloo across the two."""
    run = "rehearsal-torchrun"
    recipe = "recipes/examples/torch-ddp/recipe.yaml"
    result = run_verb(aws["env"], "rayfleet.cli.main", "run", recipe, "--on", "ecs", "--name", run, timeout=900)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "[node 0] done: 30 steps" in result.stdout and "[node 1] rank 1/2 ready on" in result.stdout
    assert run_record(aws, run)["state"] == "SUCCEEDED"
    s3 = aws["client"]("s3")
    bucket = aws["outputs"]["results_bucket"]
    seen = [
        json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{run}/ranks/rank-{r}.json")["Body"].read()) for r in (0, 1)
    ]
    workers = {podman("exec", w, "hostname").stdout.strip() for w in containers(rehearsal.rid, "-ray-worker")}
    assert {s["host"] for s in seen} == workers, (seen, workers)  # one rank in each worker task, none elsewhere
    assert [s["RAYFLEET_NODE_RANK"] for s in seen] == ["0", "1"] and {s["world_size"] for s in seen} == {2}
    assert all(s["losses"][-1] < s["losses"][0] for s in seen)
    assert f"runs/{run}/checkpoint/state.pt" in keys(aws, f"runs/{run}/")


MODEL_PROBE = """
import os
from transformers import AutoModelForCausalLM
from rayfleet.train.models.hf import resolve_model_dir
found = resolve_model_dir("tiny-gpt-neox")  # as the FSDP job's ranks resolve the id the driver hands them
model = AutoModelForCausalLM.from_pretrained(found)
count = sum(p.numel() for p in model.parameters())
print(f"[model] {os.uname().nodename}: {found}, {count} parameters, offline={os.environ.get('HF_HUB_OFFLINE')}")
"""


def test_the_ranks_load_the_model_from_their_own_image_while_the_trainer_holds_none(rehearsal, aws, tmp_path):
    """issue 52: driver and ranks on different file systems. The rehearsal's group has models = true, so ECS
    started its workers from ray-worker:test-models (the tiny GPT-NeoX preloaded) and the trainer from the plain
    trainer image, which has no /models. A launcher recipe's ranks, one on each worker task, load the model by
    its id from their own node, offline (no download could happen: the images set HF_HUB_OFFLINE). The FSDP job's
    ranks resolve the id the same way (rayfleet/train/models/hf.py); its loop is the local cluster's to train."""
    assert ONE_GROUP_WORKERS in (REPO / "infra" / "one-group.tfvars").read_text()  # the group it adds models to
    workers = containers(rehearsal.rid, "-ray-worker")
    images_run = {podman("inspect", "--format", "{{.ImageName}}", w).stdout.strip() for w in workers}
    assert images_run == {"localhost/rayfleet/ray-worker:test-models"}, images_run
    trainer = aws["client"]("ecs").describe_task_definition(taskDefinition=aws["outputs"]["trainer_task_definition"])
    (image,) = {c["image"] for c in trainer["taskDefinition"]["containerDefinitions"]}
    assert image == "localhost/rayfleet/trainer:test"
    none = podman("run", "--rm", "--entrypoint", "test", image, "-e", "/models", check=False, timeout=120)
    assert none.returncode == 1  # the driver's image holds no weights
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "probe.py").write_text(MODEL_PROBE)
    recipe = {"name": "model-probe", "code": "code", "entrypoint": "probe.py", "launcher": "torchrun",
              "resources": {"workers": 2, "cpus_per_worker": 1}}  # fmt: skip
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    run = "rehearsal-model-probe"
    result = run_verb(aws["env"], "rayfleet.cli.main", "run", str(tmp_path / "recipe.yaml"), "--on", "ecs",
                      "--name", run, timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    loaded = re.findall(r"\[model\] (\S+): /models/tiny-gpt-neox, (\d+) parameters, offline=1", result.stdout)
    hosts = {podman("exec", w, "hostname").stdout.strip() for w in workers}
    assert {h for h, _ in loaded} == hosts and len({n for _, n in loaded}) == 1, result.stdout[-4000:]


def ray_status_nodes(head: str) -> list[str]:
    """The node lines of `ray status` on the head (Active: ... lines naming nodes)."""
    result = podman("exec", head, "ray", "status", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return [line.strip() for line in result.stdout.splitlines() if line.strip().startswith(("1 node_", "node_"))]


def worker_ids(rid: str) -> dict[str, str]:
    """The worker containers by name, with their ids: the same ones, never restarted, keep theirs."""
    return {
        name: podman("inspect", "--format", "{{.Id}}", name).stdout.strip() for name in containers(rid, "-ray-worker")
    }


def rows_of(aws, run: str) -> list[dict]:
    """metrics.jsonl of the run, [] before its first epoch ends."""
    try:
        return metrics(aws, run)
    except aws["client"]("s3").exceptions.NoSuchKey:
        return []


def new_head(rid: str, old: str) -> str | None:
    """The head container that replaced `old`, once Ray's view on it holds the head and both workers."""
    heads = [h for h in containers(rid, "-ray-head") if h != old]
    with contextlib.suppress(AssertionError, ValueError, subprocess.TimeoutExpired):  # it fails while it starts
        if len(heads) == 1 and ray_nodes_alive(heads[0]) == 3:
            return heads[0]
    return None


def worker_logs(aws, workers: dict[str, str]) -> dict[str, str]:
    """Each worker container's own log, as its task shipped it to CloudWatch Logs."""
    text = {name: "" for name in workers}
    pages = aws["client"]("logs").get_paginator("filter_log_events")
    group = f"/rayfleet/{aws['outputs']['cluster_name']}/ray-worker"
    for event in (e for page in pages.paginate(logGroupName=group) for e in page["events"]):
        for name in workers:
            if name.split("-worker-")[1][:8] in event["logStreamName"]:
                text[name] += event["message"] + "\n"
    return text


def rejoins(aws, workers: dict[str, str], host: str) -> dict[str, int]:
    """How often each worker container's own log says it resolved the head's name again (rayfleet/node/ray_node.py:
    the name moved, or its raylet left a head that went away)."""
    return {name: out.count(f"resolving {host} again") for name, out in worker_logs(aws, workers).items()}


def test_a_head_killed_without_a_store_is_replaced_and_the_same_workers_rejoin_it(rehearsal, aws):
    """The default deployment (no GCS store): the head container is SIGKILLed (its instance lost), the service
    starts a new head with a new IP, and the same worker containers (never restarted: ECS replaces nothing of
    theirs) resolve the head's Cloud Map name again and rejoin it, as rayfleet/node/ray_node.py does without
    RAYFLEET_GCS_STORE; the new head knows nothing of the old cluster, so Ray's view of the two workers comes
    from their rejoining alone. What only this shows: the rejoin on real raylets, with the task definitions
    Terraform renders by default (tests/unit/node/test_ray_node.py drives a fake `ray`). No run is on the
    cluster: a driver whose head went away exits EXIT_HEAD_LOST and the laptop relaunches its trainer task
    (tests/integration/test_recipe_run_on_ecs.py)."""
    rid, host = rehearsal.rid, aws["outputs"]["head_dns_name"]
    assert "GCS store" not in rehearsal.output  # the default deployment
    old_head = head_container(rid)
    old_ip = podman("exec", old_head, "hostname", "-I").stdout.split()
    workers = worker_ids(rid)
    assert len(workers) == 2 and ray_nodes_alive(old_head) == 3
    before = rejoins(aws, workers, host)
    killed_at = time.monotonic()
    podman("kill", old_head, timeout=60)  # SIGKILL: nothing of Ray's own shutdown runs
    deadline = time.monotonic() + 600
    while (head := new_head(rid, old_head)) is None:
        assert time.monotonic() < deadline, rehearsal.output[-4000:]
        time.sleep(2)
    print(f"head killed (no store) -> new head with both workers {time.monotonic() - killed_at:.0f}s")
    assert podman("exec", head, "hostname", "-I").stdout.split() != old_ip
    assert worker_ids(rid) == workers  # the same containers: they rejoined, nothing replaced them
    deadline = time.monotonic() + 30  # the shipper sends each line within about a second
    while True:  # each worker container said it resolved the name again, since the kill
        after = rejoins(aws, workers, host)
        if all(after[w] > before[w] for w in workers):
            break
        assert time.monotonic() < deadline, (before, after, log_text(aws, "ray-worker")[-3000:])
        time.sleep(1)


def test_a_worker_with_another_token_is_kept_out(rehearsal, aws):
    """The secret changes and one worker task is replaced without the head (a rotation done halfway): the new
    worker gets the new token from Secrets Manager and the head refuses it."""
    out, ecs = aws["outputs"], aws["client"]("ecs")
    cluster = out["cluster_name"]
    aws["client"]("secretsmanager").put_secret_value(SecretId=out["ray_token_secret_arn"], SecretString="y" * 48)
    group = f"service:{out['worker_groups']['default']['service_name']}"
    arns = ecs.list_tasks(cluster=cluster, desiredStatus="RUNNING")["taskArns"]
    workers = [t for t in ecs.describe_tasks(cluster=cluster, tasks=arns)["tasks"] if t.get("group") == group]
    victim = workers[0]["taskArn"]
    ecs.stop_task(cluster=cluster, task=victim, reason="token test")
    logs = aws["client"]("logs")
    deadline = time.monotonic() + 240
    while not refusals(logs, cluster, victim):
        assert time.monotonic() < deadline, rehearsal.output[-3000:]
        time.sleep(2)
    head = head_container(rehearsal.rid)
    deadline = time.monotonic() + 120  # the stopped worker's node leaves Ray's view first
    while ray_nodes_alive(head) != 2:
        assert time.monotonic() < deadline, "the stopped worker's node stayed alive in Ray"
        time.sleep(3)
    # The new worker keeps trying with its token and stays out: wait for it to be refused once more after the
    # stopped node has left Ray's view (an event, not a pause), then count the nodes again.
    seen = len(refusals(logs, cluster, victim))
    deadline = time.monotonic() + 240
    while len(refusals(logs, cluster, victim)) <= seen:
        assert time.monotonic() < deadline, "the new worker was not refused again"
        time.sleep(2)
    assert ray_nodes_alive(head) == 2  # the head and the worker that kept its token


def refusals(logs, cluster: str, victim: str) -> list[dict]:
    """The head's refusals of a token, as the worker tasks other than the stopped one logged them."""
    pages = logs.get_paginator("filter_log_events").paginate(logGroupName=f"/rayfleet/{cluster}/ray-worker")
    return [
        e
        for page in pages
        for e in page["events"]
        if "InvalidAuthToken" in e["message"] and not e["logStreamName"].endswith(victim.rsplit("/", 1)[-1])
    ]


def test_rotate_ray_token_brings_every_node_back(rehearsal, aws):
    """After the half-done rotation above, `rayfleet token rotate` restarts the head, then the workers (forced
    new deployments), and all of them join with the new token."""
    result = run_verb(aws["env"], "rayfleet.cli.main", "token", "rotate", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "head: 1 new task(s) running" in result.stdout and "worker: 2 new task(s) running" in result.stdout
    secret = aws["client"]("secretsmanager").get_secret_value(SecretId=aws["outputs"]["ray_token_secret_arn"])
    deadline = time.monotonic() + 240
    while True:
        head = containers(rehearsal.rid, "-ray-head")
        # ray_nodes_alive fails while the new head's dashboard starts (in a CI run: connection refused)
        with contextlib.suppress(AssertionError, ValueError, subprocess.TimeoutExpired):
            if len(head) == 1 and ray_nodes_alive(head[0]) == 3:
                break
        assert time.monotonic() < deadline, rehearsal.output[-3000:]
        time.sleep(5)
    assert podman("exec", head[0], "printenv", "RAY_AUTH_TOKEN").stdout.strip() == secret["SecretString"]
    assert "(forceNewDeployment)" in rehearsal.output


def test_a_head_killed_mid_run_is_replaced_on_its_store_and_the_run_goes_on(rehearsal, aws):
    """`gcs_store = { enabled = true }` applied to the running default deployment (tools/rehearsal/reapply.py: new
    revisions of the head, worker and trainer definitions, the store's secret, its stand-in, new deployments of the
    head and worker services), then the head container is SIGKILLed (its instance lost) while a DDP recipe run
    trains through the trainer task; the service starts a new head with a new IP on the same GCS store (TLS, the
    AUTH token from the secret, this deployment's namespace). What no other test shows, with the task definitions
    Terraform renders: the same worker containers (never restarted) and their raylets (never left:
    RAYFLEET_GCS_STORE) reconnect to the new head by its Cloud Map name, the trainer task is never relaunched, Ray's
    new head takes the job back and the run goes on without a resubmission or a restart (each epoch once, Ray
    Train's attempt unchanged) to SUCCEEDED, and `make runs` lists it once. One known Ray fault is allowed, named,
    as on the local cluster: the new head's job monitor may fail the job on an RPC error of its own
    (ray-project/ray#65025) and rayfleet submits it once more, from its checkpoint: exactly one attempt, or exactly
    two with that reason. Without a store (the default) a worker resolves the name again and rejoins instead (the
    test above)."""
    rid, run, epochs = rehearsal.rid, "rehearsal-headloss", 6
    before = {"head": containers(rid, "-ray-head"), "workers": set(containers(rid, "-ray-worker"))}
    print(rehearsal.apply(rehearsal.store_vars))
    assert "GCS store: redis-server" in rehearsal.output
    deadline = time.monotonic() + 600  # ECS stops the old deployment's tasks, then starts the new one's
    steady = 0
    while True:
        heads, workers = containers(rid, "-ray-head"), containers(rid, "-ray-worker")
        formed = len(heads) == 1 and heads != before["head"] and len(workers) == 2
        # and a head that passed its health check: the store's first head may fail its start-up and be replaced.
        # Counting 3 alive nodes is not enough: the GCS on the store keeps the replaced deployment's nodes until it
        # finds them dead, and its dashboard listed 3, then 4 (fresh22: a stopped worker's node, still ALIVE in the
        # store's node table). Formed is when the alive nodes are exactly the running containers, twice in a row.
        if formed and not before["workers"] & set(workers) and health_of(heads[0]) == "healthy":
            with contextlib.suppress(AssertionError, ValueError, IndexError, subprocess.TimeoutExpired):
                running = {container_ip(c) for c in [*heads, *workers]}
                steady = steady + 1 if alive_node_ips(heads[0]) == running else 0
                if steady >= 2:
                    break
        assert time.monotonic() < deadline, rehearsal.output[-4000:]
        time.sleep(2)
    assert podman("exec", heads[0], "printenv", "RAY_REDIS_ADDRESS").stdout.startswith("rediss://")
    assert {podman("exec", w, "printenv", "RAYFLEET_GCS_STORE").stdout.strip() for w in workers} == {"1"}
    old_head = head_container(rid)
    old_ip = podman("exec", old_head, "hostname", "-I").stdout.split()
    workers = worker_ids(rid)
    alive = ray_nodes_alive(old_head)
    assert len(workers) == 2 and alive == 3, (heads, old_head, alive, rehearsal.output[-4000:])
    # What the head kill must not cause is counted from here: how the store's deployment formed before this (its
    # first head may fail its own start-up and be replaced, as below) is not what this test is about.
    rejoined = rejoins(aws, workers, aws["outputs"]["head_dns_name"])
    args = ["recipes/ddp.yaml", "--on", "ecs", "--name", run, *data_of(rehearsal), "--", f"epochs={epochs}"]
    follow = start_verb(aws["env"], "rayfleet.cli.main", "run", *args, *SMALL[1:])
    try:
        deadline = time.monotonic() + 400
        while not (rows := rows_of(aws, run)):
            assert time.monotonic() < deadline and follow.poll() is None, "no first epoch"
            time.sleep(0.5)
        killed_at, before = time.monotonic(), len(rows)
        podman("kill", old_head, timeout=60)  # SIGKILL: nothing of Ray's own shutdown runs
        next_epoch_s = new_head_s = None
        deadline = time.monotonic() + 600
        while new_head_s is None or next_epoch_s is None:
            if next_epoch_s is None and len(rows_of(aws, run)) > before:
                next_epoch_s = time.monotonic() - killed_at
            heads = [h for h in containers(rid, "-ray-head") if h != old_head]
            with contextlib.suppress(AssertionError, ValueError, subprocess.TimeoutExpired):
                if new_head_s is None and heads and ray_nodes_alive(heads[0]) == 3:  # fails while it starts
                    new_head_s = time.monotonic() - killed_at
            assert time.monotonic() < deadline, rehearsal.output[-4000:]
            time.sleep(2)
        output, _ = follow.communicate(timeout=900)
    finally:
        if follow.poll() is None:
            follow.kill()
    print(f"head killed -> next epoch's row {next_epoch_s:.0f}s, new head with both workers {new_head_s:.0f}s")
    assert follow.returncode == 0, output[-8000:]
    # The head running now: a replacement that failed its own start-up (Ray's start-up wait, on a loaded host)
    # is replaced again by the service, as ECS does, and its dashboard may have answered first with the nodes
    # its store remembered. What must hold is of the head that runs the cluster now.
    running = [h for h in containers(rid, "-ray-head") if h != old_head]
    assert len(running) == 1, (running, rehearsal.output[-4000:])
    new_head = running[0]
    new_ip = podman("exec", new_head, "hostname", "-I").stdout.split()
    assert new_ip and new_ip != old_ip, (old_ip, new_ip)
    assert worker_ids(rid) == workers
    # their raylets stayed: Ray reconnected them (these containers' logs; the default deployment's rejoined)
    counts = rejoins(aws, workers, aws["outputs"]["head_dns_name"])
    assert counts == rejoined, (rejoined, counts, {n: log[-6000:] for n, log in worker_logs(aws, workers).items()})
    # `ray status` reads the autoscaler's view, refreshed every few seconds. In one fresh-clone run it still listed
    # 4 nodes 60 s after the run (root cause not yet found; docs/testing.md's flakiness table): on failure the
    # message shows what nodes_seen gathers (the dashboard's nodes, every container, the monitor's log).
    deadline = time.monotonic() + 120
    while len(nodes := ray_status_nodes(new_head)) != 3 and time.monotonic() < deadline:
        time.sleep(5)
    assert len(nodes) == 3, (nodes, nodes_seen(new_head, rid))  # the new head: itself and the two workers
    assert "relaunching it with the same overrides" not in output  # the trainer task lived on
    record = run_record(aws, run)
    assert record["state"] == "SUCCEEDED" and record["exit_code"] == 0, record
    rows = rows_of(aws, run)
    assert [r["epoch"] for r in rows] == list(range(1, epochs + 1)), rows  # each epoch once
    attempts = record["attempts"]
    assert len(attempts) in (1, 2), attempts  # exactly one, or ray-project/ray#65025's one resubmission
    if len(attempts) == 1:  # the path Ray means: nothing restarted
        restarts = [(r["epoch"], r["attempt"], r["steps_redone"], r.get("resumed_from")) for r in rows]
        # on failure: each epoch's (epoch, attempt, steps redone, checkpoint resumed from), and what the trainer
        # and the workers logged, to tell a Ray Train restart inside the job from anything else
        assert all(r["attempt"] == 0 and r["steps_redone"] == 0 for r in rows), (restarts, output[-6000:])
    else:  # ray-project/ray#65025: one more submission, from the checkpoint, for that reason and no other
        assert attempts[0]["state"] == "FAILED" and attempts[0]["why"].startswith(jobs_api.MONITOR_RPC_FAILED)
        assert attempts[1]["state"] == "SUCCEEDED" and attempts[1]["reason"].startswith(ray_faults.MONITOR_FAULT)
        # The newest complete checkpoint, named in the record and by the resuming job's rows; retention may have
        # deleted it since (keep_checkpoints), so its name, not its presence now, is what is checked.
        read = attempts[1]["resumed_from"]
        assert re.fullmatch(r"checkpoint_\d{6}", read), attempts
        assert {r["resumed_from"] for r in rows if r.get("resumed_from")} == {read}, rows  # the second's rows
    listed = run_verb(aws["env"], "rayfleet.cli.main", "runs", "--json", timeout=120)
    assert [r["state"] for r in json.loads(listed.stdout) if r["run"] == run] == ["SUCCEEDED"]


def test_make_stop_twice_stops_the_containers(rehearsal, aws):
    for attempt in range(2):
        result = run_verb(aws["env"], "rayfleet.cli.main", "deploy", "stop", timeout=600)
        assert result.returncode == 0, (attempt, result.stdout, result.stderr)
        assert "services at 0" in result.stdout
    deadline = time.monotonic() + 240
    while containers(rehearsal.rid, "-ray-worker") or containers(rehearsal.rid, "-ray-head"):
        assert time.monotonic() < deadline, rehearsal.output[-3000:]
        time.sleep(2)


def test_ctrl_c_leaves_nothing_running(rehearsal, aws):
    port = rehearsal.state["moto_port"]
    assert rehearsal.interrupt() == 0, rehearsal.output[-3000:]
    assert "nothing of this rehearsal is left running" in rehearsal.output
    assert left_behind(rehearsal.rid) == []
    assert processes(f"rf-{rehearsal.rid}-") == []  # no `podman logs -f` follower either
    assert not (rehearsal.state_dir / "state.json").exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=3)
