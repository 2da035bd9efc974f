"""One screen on the ECS cluster: services, tasks, Ray's view, recent runs, and what it costs per hour.

python -m scripts.status [--json] [--runs 5]        # make status
"""

from __future__ import annotations

import argparse
import json
import sys

from scripts.aws import Aws, run_cli
from scripts.cluster_tasks import running_tasks
from scripts.head_snapshot import KEY as RAY_STATUS_KEY
from scripts.prices import PRICES_AS_OF, gpus_of, hourly_cost
from scripts.tf_outputs import Outputs


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
    types = {
        i["InstanceId"]: i["InstanceType"]
        for r in ec2.describe_instances(InstanceIds=ids)["Reservations"]
        for i in r["Instances"]
    }
    result = {}
    for ci in described:
        instance_type = types.get(ci["ec2InstanceId"], "?")
        result[ci["containerInstanceArn"]] = {
            "instance_id": ci["ec2InstanceId"],
            "instance_type": instance_type,
            "gpus": registered_gpus(ci) if registered_gpus(ci) is not None else (gpus_of(instance_type) or 0),
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


def _ray_view(aws: Aws, out: Outputs) -> dict | None:
    s3 = aws.client("s3")
    try:
        return json.loads(s3.get_object(Bucket=out.results_bucket, Key=RAY_STATUS_KEY)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def task_state(ecs, out: Outputs, task_arn: str) -> str:
    """A trainer task's state as a run state: PROVISIONING..RUNNING, SUCCEEDED or FAILED (exit N)."""
    tasks = ecs.describe_tasks(cluster=out.cluster_name, tasks=[task_arn]).get("tasks", [])
    if not tasks:
        return "UNKNOWN"
    task = tasks[0]
    code = next((c.get("exitCode") for c in task.get("containers", []) if c["name"] == out.trainer_container_name),
                None)  # fmt: skip
    if task["lastStatus"] == "STOPPED":
        return "SUCCEEDED" if code == 0 else f"FAILED (exit {code})"
    return task["lastStatus"]


def _runs(aws: Aws, out: Outputs, limit: int) -> list[dict]:
    s3, ecs = aws.client("s3"), aws.client("ecs")
    records = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=out.results_bucket, Prefix="runs/", Delimiter="/"):
        for prefix in page.get("CommonPrefixes", []):
            try:
                obj = s3.get_object(Bucket=out.results_bucket, Key=prefix["Prefix"] + "launch.json")
            except s3.exceptions.NoSuchKey:
                continue
            records.append(json.loads(obj["Body"].read()))
    records.sort(key=lambda r: r["launched_at"], reverse=True)
    runs = []
    for record in records[:limit]:
        state = task_state(ecs, out, record["task_arn"])
        listing = s3.list_objects_v2(
            Bucket=out.results_bucket, Prefix=f"runs/{record['run_name']}/checkpoint_", Delimiter="/"
        )
        checkpoints = sorted(p["Prefix"].rstrip("/").rsplit("/", 1)[-1] for p in listing.get("CommonPrefixes", []))
        runs.append(
            {
                "run": record["run_name"],
                "job": record["job"],
                "state": state,
                "launched_at": record["launched_at"],
                "last_checkpoint": checkpoints[-1] if checkpoints else None,
                "results": record["results"],
            }
        )
    return runs


def status(aws: Aws, out: Outputs, runs: int = 5) -> dict:
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    services = ecs.describe_services(
        cluster=out.cluster_name, services=[out.head_service_name, out.worker_service_name]
    )["services"]
    instances = _instances(aws, out.cluster_name)
    cost, unknown = hourly_cost([i["instance_type"] for i in instances.values()])
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
        "instances": list(instances.values()),
        "tasks": _tasks(aws, out, instances),
        "ray": _ray_view(aws, out),
        "runs": _runs(aws, out, runs),
        "cost_per_hour_usd": round(cost, 3),
        "cost_unknown_types": unknown,
        "prices_as_of": PRICES_AS_OF,
    }


def render(s: dict) -> str:
    lines = [f"cluster {s['cluster']} ({s['region']})", "", "services        desired running pending"]
    lines += [f"  {v['name']:<14}{v['desired']:>7}{v['running']:>8}{v['pending']:>8}" for v in s["services"]]
    lines += ["", "tasks"]
    lines += [
        f"  {t['role']:<8}{t['task'][:12]:<14}{t['status']:<10}{t['health']:<10}{t['instance_type']:<14}{t['gpus']} GPU"
        for t in s["tasks"]
    ] or ["  (none running)"]
    ray = s["ray"]
    lines += ["", "ray (as the head reports it" + (f", {ray['taken_at']})" if ray else ")")]
    if ray:
        alive = sum(n["alive"] for n in ray["nodes"])
        total, free = ray["total"], ray["available"]
        shown = [k for k in ("CPU", "GPU", "memory") if k in total]
        lines.append(f"  {alive} nodes alive; " + ", ".join(f"{k} {free.get(k, 0):g}/{total[k]:g} free" for k in shown))
    else:
        lines.append("  no snapshot yet (the head writes one every 30 s once it runs)")
    lines += ["", "recent runs"]
    lines += [
        f"  {r['run']:<28}{r['state']:<20}{r['last_checkpoint'] or '-':<22}{r['results']}" for r in s["runs"]
    ] or ["  (none)"]
    unknown = f" (+ unpriced: {', '.join(s['cost_unknown_types'])})" if s["cost_unknown_types"] else ""
    lines += [
        "",
        f"cost: ${s['cost_per_hour_usd']:.2f}/hour for {len(s['instances'])} instance(s){unknown}; "
        f"prices {s['prices_as_of']}; `make stop` scales to zero",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.status", description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--runs", type=int, default=5, help="how many recent runs to show")
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    args = parser.parse_args(argv)
    out = Outputs.load(args.outputs)
    result = status(Aws(out.region), out, args.runs)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
