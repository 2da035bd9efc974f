"""What `rayfleet status` shows, gathered: services, tasks and their instances, why capacity is not coming
(rayfleet/ecs/capacity.py), Ray's view from the control task's snapshot (stale after STALE_AFTER_S), the
run queue, recent runs, and the cost per hour."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from rayfleet.core.aws import Aws
from rayfleet.core.bucket import RAY_STATUS as RAY_STATUS_KEY
from rayfleet.core.catalog import PRICES_AS_OF, gpus_of, hourly_cost
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.core.run_queue import WAITING, Queue
from rayfleet.ecs import capacity
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.tasks import running_tasks
from rayfleet.ops.runs import s3_runs
from rayfleet.ops.runs.queued import listed
from rayfleet.ops.status import goodput
from rayfleet.recipes.cost import spend_usd


def registered_gpus(container_instance: dict) -> int | None:
    """GPUs the ECS agent registered (a STRINGSET of GPU ids), or None when it reports none."""
    for resource in container_instance.get("registeredResources", []):
        if resource["name"] == "GPU":
            return len(resource.get("stringSetValue", []))
    return None


def _instances(aws: Aws, cluster: str) -> dict[str, dict]:
    """container instance ARN -> {instance_id, instance_type, gpus}."""
    ecs, ec2 = aws.client("ecs"), aws.client("ec2")
    arns = [
        a
        for p in ecs.get_paginator("list_container_instances").paginate(cluster=cluster)
        for a in p["containerInstanceArns"]
    ]
    if not arns:
        return {}
    described = ecs.describe_container_instances(cluster=cluster, containerInstances=arns)["containerInstances"]
    ids = [ci["ec2InstanceId"] for ci in described]
    ec2_instances = {
        i["InstanceId"]: i for r in ec2.describe_instances(InstanceIds=ids)["Reservations"] for i in r["Instances"]
    }
    result = {}
    for ci in described:
        found = ec2_instances.get(ci["ec2InstanceId"], {})
        instance_type = found.get("InstanceType", "?")
        result[ci["containerInstanceArn"]] = {
            "instance_id": ci["ec2InstanceId"],
            "instance_type": instance_type,
            "gpus": registered_gpus(ci) if registered_gpus(ci) is not None else (gpus_of(instance_type) or 0),
            "launch_time": found.get("LaunchTime"),
            "lifecycle": "spot" if found.get("InstanceLifecycle") == "spot" else "on-demand",
        }
    return result


def _tasks(aws: Aws, out: Outputs, instances: dict) -> list[dict]:
    rows = []
    for role, tasks in running_tasks(aws.client("ecs"), out).items():
        for task in tasks:
            where = instances.get(task.get("containerInstanceArn"), {})
            rows.append(
                {
                    "role": role,
                    "task": task["taskArn"].rsplit("/", 1)[-1],
                    "status": task["lastStatus"],
                    "health": task.get("healthStatus", "UNKNOWN"),
                    "instance_type": where.get("instance_type", "?"),
                    "instance_id": where.get("instance_id", "?"),
                    "gpus": where.get("gpus", 0),
                }
            )
    return rows


# The control task writes Ray's view every SNAPSHOT_INTERVAL_S (its `--interval`, infra/modules/ray); a view
# older than STALE_ROUNDS rounds means it has stopped (stopped by autostop, crashing, or refused by a head
# whose token it does not hold) and what it shows is history, not the cluster now.
SNAPSHOT_INTERVAL_S = 30
STALE_ROUNDS = 4
STALE_AFTER_S = STALE_ROUNDS * SNAPSHOT_INTERVAL_S


def ray_age_s(ray: dict | None, now: datetime) -> float | None:
    """Seconds since the snapshot was taken; None without a snapshot or with a time that does not parse."""
    try:
        taken = datetime.fromisoformat(str((ray or {})["taken_at"]))
    except (KeyError, ValueError):
        return None
    return (now - (taken if taken.tzinfo else taken.replace(tzinfo=UTC))).total_seconds()


def ray_section(ray: dict | None, now: datetime, age_s: float | None = None) -> dict:
    """The snapshot with its age and whether it is stale (older than STALE_AFTER_S, or of unknown age).
    `age_s`: its age by S3's own clock (see `_ray_view`), which a laptop's wrong clock cannot skew; else the
    age from the time the snapshot says it was taken."""
    age = age_s if age_s is not None else ray_age_s(ray, now)
    return {
        "ray": ray,
        "ray_age_s": None if age is None else round(age),
        "ray_stale": ray is not None and (age is None or age > STALE_AFTER_S),
    }


def service_names(out: Outputs) -> list[str]:
    """The services `status` lists: the head, the workers and the control task (absent before issue 27)."""
    return [out.head_service_name, *out.worker_service_names] + [s for s in [out.control_service_name] if s]


def ray_view(s3, bucket: str) -> tuple[dict | None, float | None]:
    """The head's snapshot and its age by S3's clock alone (when S3 answered, from its Date header, less when
    the object was written), or (None, None) when there is none."""
    try:
        got = s3.get_object(Bucket=bucket, Key=RAY_STATUS_KEY)
    except s3.exceptions.NoSuchKey:
        return None, None
    ray = json.loads(got["Body"].read())
    try:
        answered = parsedate_to_datetime(got["ResponseMetadata"]["HTTPHeaders"]["date"])
        return ray, (answered - got["LastModified"]).total_seconds()
    except (KeyError, TypeError, ValueError):
        return ray, None


def last_checkpoint(run_dir: RunDir) -> str | None:
    # checkpoint_<epoch> or checkpoint_step_<step>, not Ray's checkpoint_manager_snapshot.json beside them
    names = (name for name in run_dir.entries() if re.fullmatch(r"checkpoint_(step_)?\d+", name))
    return max(names, default=None)


def _runs(out: Outputs, rows: list[dict], limit: int) -> list[dict]:
    """The newest runs of the deployment from the one listing (rayfleet.ops.runs), with checkpoints."""
    runs = []
    for row in rows[:limit]:
        run_dir = RunDir(runs_root(out.results_bucket), row["run"], region=out.region)
        runs.append({**row, "last_checkpoint": last_checkpoint(run_dir)})
    return runs


CAPACITY_LOOKBACK = timedelta(hours=1)


def worker_activities(aws: Aws, out: Outputs, since: datetime) -> dict[str, list[dict]]:
    """Each worker group's Auto Scaling activities since `since` (its launches and terminations)."""
    autoscaling = aws.client("autoscaling")
    groups = out.worker_groups.items()
    return {
        n: capacity.scaling_activities(autoscaling, g.autoscaling_group, since)
        for n, g in groups
        if g.autoscaling_group
    }


def status(aws: Aws, out: Outputs, runs: int = 5, why=capacity.reasons, activities=worker_activities) -> dict:
    """`why` (aws, out, since) -> [capacity.Reason]: the capacity reasons; `activities` (aws, out, since) -> the
    worker groups' scaling activities (the tests pass recorded ones of both)."""
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    services = ecs.describe_services(cluster=out.cluster_name, services=service_names(out))["services"]
    instances = _instances(aws, out.cluster_name)
    cost, unknown = hourly_cost([i["instance_type"] for i in instances.values()])
    spent, since = spend_usd(aws.client("ec2"), list(instances.values()), datetime.now(UTC))
    reasons = why(aws, out, datetime.now(UTC) - CAPACITY_LOOKBACK)
    view, view_age = ray_view(aws.client("s3"), out.results_bucket)
    queue = _queue(out)
    listed_runs = s3_runs(out)
    now = datetime.now(UTC)
    since = now - goodput.WINDOW
    nodes_usd = goodput.worker_usd(out, list(instances.values()), activities(aws, out, since), since, now)
    return {
        "cluster": out.cluster_name,
        "region": aws.region,
        "services": [
            {
                "name": s["serviceName"],
                "desired": s["desiredCount"],
                "running": s["runningCount"],
                "pending": s["pendingCount"],
            }
            for s in services
        ],
        "instances": [{k: v for k, v in i.items() if k != "launch_time"} for i in instances.values()],
        "tasks": _tasks(aws, out, instances),
        "capacity": [{"reason": r.text, "fatal": r.fatal} for r in reasons],
        **ray_section(view, datetime.now(UTC), view_age),
        "runs": _runs(out, listed_runs, runs),
        "goodput": goodput.summary(goodput.within(listed_runs, since), nodes_usd),
        "queue": queue,
        "groups": group_rows(out, services, queue),
        "cost_per_hour_usd": round(cost, 3),
        "cost_unknown_types": unknown,
        "spent_usd": spent,
        "running_since": since.isoformat(timespec="seconds") if since else None,
        "prices_as_of": PRICES_AS_OF,
    }


def group_rows(out: Outputs, services: list[dict], queue: list[dict]) -> list[dict]:
    """Per worker group: its nodes (the service's tasks, desired and running), GPUs and list price per hour of
    the running ones, and the runs waiting in its line of the queue (the first one's reason and wait)."""
    by_name = {s["serviceName"]: s for s in services}
    rows = []
    for name, group in out.worker_groups.items():
        service = by_name.get(group.service_name, {})
        running = int(service.get("runningCount", 0))
        price, _ = hourly_cost([group.instance_type] * running)
        line = [r for r in queue if r.get("group") == name and r.get("state") == WAITING]
        first = line[0] if line else None
        rows.append(
            {
                "group": name,
                "instance_types": list(group.types),
                "desired": int(service.get("desiredCount", 0)),
                "running": running,
                "max": group.max_nodes,
                "gpus": running * group.gpus,
                "usd_per_hour": round(price, 3),
                "waiting": len(line),
                "first": None if first is None else {k: first.get(k) for k in ("run", "reason", "since_s")},
            }
        )
    return rows


def _queue(out: Outputs) -> list[dict]:
    """The deployment's run queue, as `make queue` lists it (rayfleet/ops/runs/queued.py)."""
    if not out.results_bucket:
        return []
    now = datetime.now(UTC).timestamp()
    return listed(Queue(f"s3://{out.results_bucket}"), "ecs", now)
