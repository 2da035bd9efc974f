"""Run a job on the ECS cluster: RunTask of the trainer task definition, then follow its log.

    rayfleet launch ddp [key=value ...] [--detach]
    rayfleet launch fsdp epochs=1 --name my-run

The trainer (the Ray driver) starts in the cluster's private subnets and security group, with the job and
its arguments as the container command and the run's storage under the results bucket. The verb prints the
task ARN, the run name and where results land, then follows the driver's log until the task stops and
exits with the job's exit code. `--detach` returns after the start.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from rayfleet.core.aws import STARTED_BY, Aws, PlacementFailed
from rayfleet.core.errors import RayfleetError
from rayfleet.core.moved import gone
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.ecs import image_policy
from rayfleet.ecs.logs import follow_task, log_stream
from rayfleet.ecs.outputs import Outputs

OVERRIDES_LIMIT = 8192  # RunTask: the JSON of all container overrides
_REASONS = {
    "RESOURCE:GPU": "no registered container instance has a free GPU (are the GPU instances up? rayfleet status)",
    "RESOURCE:MEMORY": "no container instance has enough free memory for the trainer",
    "RESOURCE:CPU": "no container instance has enough free CPU for the trainer",
    "AGENT": "the ECS agent on the instance is disconnected",
    "MISSING": "a named resource (cluster, task definition) is missing",
}


def explain(failures: list[dict]) -> str:
    if not failures:
        return "ECS started no task and gave no reason (no container instances registered yet? rayfleet status)"
    parts = []
    for failure in failures:
        reason = failure.get("reason", "?")
        parts.append(f"{reason}: {_REASONS.get(reason, failure.get('detail') or 'see the ECS console')}")
    return "ECS could not place the trainer: " + "; ".join(parts)


def build_command(job: str, args: list[str], bucket: str, run_name: str) -> list[str]:
    return [job, f"storage={runs_root(bucket)}", f"run_name={run_name}", *args]


SLOTS_FULL = ("RESOURCE:MEMORY", "RESOURCE:CPU")  # the trainer is placed on the head instance only: its shares


def launch(
    aws: Aws,
    out: Outputs,
    job: str,
    args: list[str],
    run_name: str | None = None,
    *,
    command: list[str] | None = None,
    environment: dict[str, str] | None = None,
    task_definition: str | None = None,
) -> dict:
    """RunTask of the trainer; `command`, `environment` and `task_definition` replace the job's defaults
    (a recipe run passes its own, rayfleet/targets/run.py). PlacementFailed carries the request, and whether
    every driver share of the head instance was taken (`slots_full`): a recipe run then waits for one."""
    run_name = run_name or f"{job}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    aws.check_cluster(out.cluster_name)
    request = run_task_request(out, job, args, run_name, command, environment, task_definition)
    response = aws.client("ecs").run_task(**request)
    if response.get("failures") or not response.get("tasks"):
        failures = response.get("failures", [])
        why = explain(failures)
        full = any(f.get("reason") in SLOTS_FULL for f in failures)
        if full:
            why += (
                f" (the head instance holds {out.concurrent_runs} run driver(s) at once, Terraform's concurrent_runs:"
                " wait for a run to end (rayfleet queue), cancel one (rayfleet cancel --run ...), or deploy a larger"
                " concurrent_runs: 2 needs an m5.2xlarge head or larger)"
            )
        raise PlacementFailed(why, request=request, slots_full=full)
    return placed(aws, out, job, args, run_name, response["tasks"][0]["taskArn"])


def run_task_request(
    out: Outputs,
    job: str,
    args: list[str],
    run_name: str,
    command: list[str] | None = None,
    environment: dict[str, str] | None = None,
    task_definition: str | None = None,
) -> dict:
    """RunTask's keyword arguments for this run's trainer (kept as they are when it waits for a driver slot)."""
    network = {
        "awsvpcConfiguration": {
            "subnets": list(out.private_subnet_ids),
            "securityGroups": [out.task_security_group_id],
            "assignPublicIp": "DISABLED",  # private subnets only; egress through NAT and endpoints
        }
    }
    container = {
        "name": out.trainer_container_name,
        "command": command or build_command(job, args, out.results_bucket, run_name),
        "environment": [
            {"name": k, "value": v} for k, v in {"RAYFLEET_RUN_NAME": run_name, **(environment or {})}.items()
        ],
    }
    overrides = {"containerOverrides": [container]}
    if len(json.dumps(overrides)) > OVERRIDES_LIMIT:
        raise RayfleetError(
            f"the task overrides are {len(json.dumps(overrides))} bytes, over ECS's {OVERRIDES_LIMIT}; "
            "shorten args and env (put large settings in a file in the code directory)"
        )
    return {
        "cluster": out.cluster_name,
        "taskDefinition": task_definition or out.trainer_task_definition,
        "count": 1,
        "startedBy": STARTED_BY,
        "enableExecuteCommand": True,
        "networkConfiguration": network,
        "overrides": overrides,
        "tags": [{"key": "rayfleet:run", "value": run_name}, {"key": "rayfleet:job", "value": job}],
    }


def placed(aws: Aws, out: Outputs, job: str, args: list[str], run_name: str, task_arn: str) -> dict:
    """The launch record of a trainer ECS has placed, sent to the run's record as an event."""
    record = {
        "run_name": run_name,
        "job": job,
        "args": args,
        "task_arn": task_arn,
        "log_group": out.trainer_log_group,
        "log_stream": log_stream(out, task_arn),
        "results": f"{runs_root(out.results_bucket)}/{run_name}/",
        "launched_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    run_dir = RunDir(runs_root(out.results_bucket), run_name, region=aws.region)
    state = {} if run_dir.record().get("state") else {"state": "SUBMITTED", "target": "ecs"}
    # The job's follower owns run.json (a recipe's driver in the trainer): this submitter sends an event.
    run_dir.send("launched", **record, **state)
    return record


_REGISTER_KEYS = (
    "family",
    "taskRoleArn",
    "executionRoleArn",
    "networkMode",
    "containerDefinitions",
    "volumes",
    "placementConstraints",
    "requiresCompatibilities",
    "cpu",
    "memory",
    "pidMode",
    "ipcMode",
    "runtimePlatform",
    "ephemeralStorage",
)


def trainer_with_image(aws: Aws, out: Outputs, image: str) -> str:
    """A revision of the trainer task definition whose trainer container runs `image`; returns its ARN.

    Everything else (roles, secrets, sizes, logging) is the deployed definition's, so a custom image gets
    the same token, network and limits, which is why the image must pass rayfleet/ecs/image_policy.py first.
    Revisions with the same image are reused, not registered twice."""
    ecs = aws.client("ecs")
    current = ecs.describe_task_definition(taskDefinition=out.trainer_task_definition)["taskDefinition"]
    image_policy.check(aws, current["taskDefinitionArn"].split(":")[4], image)
    containers = [dict(c) for c in current["containerDefinitions"]]
    trainer = next((c for c in containers if c["name"] == out.trainer_container_name), None)
    if trainer is None:
        raise RayfleetError(f"the trainer task definition has no container {out.trainer_container_name}")
    if trainer["image"] == image:
        return current["taskDefinitionArn"]
    trainer["image"] = image
    spec = {k: current[k] for k in _REGISTER_KEYS if current.get(k)}
    spec["containerDefinitions"] = containers
    registered = ecs.register_task_definition(**spec, tags=[{"key": "rayfleet:recipe-image", "value": image[:256]}])
    return registered["taskDefinition"]["taskDefinitionArn"]


def launch_job(
    job: str,
    args: list[str],
    name: str | None = None,
    detach: bool = False,
    as_json: bool = False,
    outputs: str | None = None,
) -> int:
    """`rayfleet launch JOB [key=value ...]`: the job module as a trainer task, followed unless `detach`."""
    out = Outputs.load(outputs)
    aws = Aws(out.region)
    record = launch(aws, out, job, args, name)
    if as_json:
        print(json.dumps(record))
    else:
        print(f"run {record['run_name']}: task {record['task_arn']}")
        print(f"  results   {record['results']}")
        print(f"  log       {record['log_group']} {record['log_stream']}  (rayfleet logs --run {record['run_name']})")
    if detach:
        return 0
    return follow_task(aws, out, record["task_arn"], record["log_stream"])


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ecs.launch", "rayfleet launch")
