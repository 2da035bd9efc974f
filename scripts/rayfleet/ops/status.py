"""One screen on the ECS cluster: services (head, workers and the control task), tasks, why capacity is not
coming (the Auto Scaling groups' failed launches and the services' placement events of the last hour:
rayfleet/ecs/capacity.py), Ray's view (flagged stale when the control task has not written it for
STALE_AFTER_S), recent runs, and what it costs per hour. Fields a job could have written (run names, states,
reasons, job ids, Serve names) go through rayfleet/core/terminal.py printable() before they reach the terminal.

rayfleet status [--json] [--runs 5]
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime

from rayfleet.core.aws import Aws
from rayfleet.core.bucket import RAY_STATUS as RAY_STATUS_KEY
from rayfleet.core.catalog import PRICES_AS_OF, gpus_of, hourly_cost
from rayfleet.core.moved import gone
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.core.run_queue import HELD, WAITING, Queue
from rayfleet.core.terminal import printable
from rayfleet.ecs import capacity
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.tasks import running_tasks
from rayfleet.ops.runs import s3_runs
from rayfleet.ops.runs.queued import IGNORED, listed
from rayfleet.recipes.cost import spend_usd
from rayfleet.serve.summary import lines as serve_lines


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
    return [out.head_service_name, out.workers.service_name] + [s for s in [out.control_service_name] if s]


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


def _runs(out: Outputs, limit: int) -> list[dict]:
    """The newest runs of the deployment from the one listing (rayfleet.ops.runs), with checkpoints."""
    runs = []
    for row in s3_runs(out)[:limit]:
        run_dir = RunDir(runs_root(out.results_bucket), row["run"], region=out.region)
        runs.append({**row, "last_checkpoint": last_checkpoint(run_dir)})
    return runs


CAPACITY_LOOKBACK = timedelta(hours=1)


def status(aws: Aws, out: Outputs, runs: int = 5, why=capacity.reasons) -> dict:
    """`why` (aws, out, since) -> [capacity.Reason]: the capacity reasons (the tests pass recorded ones)."""
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    services = ecs.describe_services(cluster=out.cluster_name, services=service_names(out))["services"]
    instances = _instances(aws, out.cluster_name)
    cost, unknown = hourly_cost([i["instance_type"] for i in instances.values()])
    spent, since = spend_usd(aws.client("ec2"), list(instances.values()), datetime.now(UTC))
    reasons = why(aws, out, datetime.now(UTC) - CAPACITY_LOOKBACK)
    view, view_age = ray_view(aws.client("s3"), out.results_bucket)
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
        "runs": _runs(out, runs),
        "queue": _queue(out),
        "cost_per_hour_usd": round(cost, 3),
        "cost_unknown_types": unknown,
        "spent_usd": spent,
        "running_since": since.isoformat(timespec="seconds") if since else None,
        "prices_as_of": PRICES_AS_OF,
    }


def _queue(out: Outputs) -> list[dict]:
    """The deployment's run queue, as `make queue` lists it (rayfleet/ops/runs/queued.py)."""
    if not out.results_bucket:
        return []
    now = datetime.now(UTC).timestamp()
    return listed(Queue(f"s3://{out.results_bucket}"), "ecs", now)


def queue_line(queue: list[dict]) -> str:
    """One line for the queue: how many runs wait (held among them) and run, the first in line and why."""
    if not queue:
        return "  empty: nothing waits and no queued run runs"
    waiting = [r for r in queue if r["state"] == WAITING]
    held = [r for r in queue if r["state"] == HELD]
    ignored = sum(1 for r in queue if r["state"] == IGNORED)
    running = len(queue) - len(waiting) - len(held) - ignored
    line = f"  {running} running, {len(waiting)} waiting" + (f", {len(held)} held by the budget" if held else "")
    line += f", {ignored} ignored (forged or unreadable)" if ignored else ""
    first = (waiting or held or [None])[0]
    shown = f"; next: {printable(first['run'])} ({printable(first['reason'])})" if first else ""
    return line + shown + "; `rayfleet queue` for all"


def _amount(name: str, value: float) -> str:
    return f"{value / 2**30:.1f}" if name in ("memory", "object_store_memory") else f"{value:g}"


def render_ray(ray: dict, jobs: int = 5) -> list[str]:
    """Ray's view from the head's snapshot (rayfleet/node/control/head_snapshot.py): nodes, resources, jobs. A
    snapshot without some part (another version's head wrote it) shows what it has, never a traceback."""
    nodes = ray.get("nodes", [])
    alive = [n for n in nodes if n.get("alive")]
    heads = sum(1 for n in alive if n.get("head"))
    workers = len(alive) - heads
    dead = len(nodes) - len(alive)
    total, free = ray.get("total", {}), ray.get("available", {})
    shown = [k for k in ("CPU", "GPU", "memory") if k in total]
    used = ", ".join(
        f"{k} {_amount(k, free[k]) if k in free else '?'}/{_amount(k, total[k])}{' GiB' if k == 'memory' else ''} free"
        for k in shown
    )
    lines = [
        f"  {len(alive)} nodes alive ({heads} head, {workers} worker{'s' if workers != 1 else ''})"
        + (f", {dead} dead" if dead else "")
        + f"; {used}"
    ]
    for n in alive:
        resources = ", ".join(f"{k} {_amount(k, v)}" for k, v in n.get("resources", {}).items() if k in ("CPU", "GPU"))
        lines.append(
            f"    {'head' if n.get('head') else 'worker':<8}{printable(n.get('node_id', '?')):<14}"
            f"{printable(n.get('address') or '?'):<16}"
            f"{resources}"
        )
    if "serve" in ray:  # application and deployment names and messages come from the jobs that deployed them
        lines.append("  serve: " + "\n    ".join(printable(line) for line in serve_lines(ray["serve"])))
    if ray.get("serve_kept"):
        lines.append(f"  serve kept: {kept_line(ray['serve_kept'])}")
    if "autostop" in ray:
        lines.append(f"  autostop: {autostop_line(ray['autostop'])}")
    if (ray.get("queue_capacity") or {}).get("wanted") or (ray.get("queue_capacity") or {}).get("error"):
        lines.append(f"  queue: {queue_capacity_line(ray['queue_capacity'])}")
    listed = ray.get("jobs") or []
    lines.append(f"  jobs ({len(listed)})" + ("" if listed else ": none"))
    for j in listed[:jobs]:
        started = j.get("start_time")
        when = datetime.fromtimestamp(started / 1000, UTC).strftime("%Y-%m-%d %H:%M") if started else "-"
        name, state = printable(j.get("submission_id") or j.get("job_id") or "?"), printable(j.get("status") or "?")
        lines.append(f"    {name:<28}{state:<11}{when}")
    return lines


def kept_line(kept: dict) -> str:
    """The Serve config `make serve` keeps, as the control task found it (rayfleet/core/serve_kept.py)."""
    if "error" in kept:
        return f"unreadable ({printable(kept['error'])})"
    again = f"; applied again to this head: {printable(', '.join(kept['reapplied']))}" if kept.get("reapplied") else ""
    return f"run {printable(kept['run'])} (a restarted head gets it back; rayfleet serve down ends it){again}"


def autostop_line(decided: dict | None) -> str:
    """What the head's autostop decided with its last snapshot (rayfleet/node/control/autostop.py)."""
    if decided is None:
        return "off"
    if "error" in decided:
        return f"cannot decide ({decided['error']})"
    if "busy" in decided:  # names the run or job that keeps the cluster busy
        return f"not idle ({printable(decided['busy'])}); stops after {decided['idle_min']:g} idle minutes"
    what = " and ".join(decided["stops"])
    if decided["stopped"]:
        return f"{what} scaled to 0 at {decided['stops_at']} (idle since {decided['idle_since']}); `rayfleet start`"
    return f"{what} to 0 at {decided['stops_at']} unless a run starts (idle since {decided['idle_since']})"


def queue_capacity_line(decided: dict) -> str:
    """What the run queue asked of the workers with the last snapshot (rayfleet/node/control/queue_capacity.py)."""
    if "error" in decided:
        return f"cannot read it ({decided['error']})"
    raised = f", raised from {decided['raised_from']}" if "raised_from" in decided else ""
    why = printable(decided["why"])
    return f"needs {decided['wanted']} worker node(s): {why} (the service wants {decided['desired']}{raised})"


def stale_line(age_s: float | None) -> str:
    """The warning over a Ray view the control task has stopped refreshing."""
    age = "of unknown age" if age_s is None else f"{age_s:.0f} s old"
    return (
        f"  STALE: this view is {age} (the control task writes one every {SNAPSHOT_INTERVAL_S} s; stale after "
        f"{STALE_AFTER_S} s): the ray-control service is stopped or cannot read the head (its log says why); "
        "what follows is the cluster as it was"
    )


def render(s: dict) -> str:
    lines = [f"cluster {s['cluster']} ({s['region']})", "", "services        desired running pending"]
    lines += [f"  {v['name']:<14}{v['desired']:>7}{v['running']:>8}{v['pending']:>8}" for v in s["services"]]
    lines += ["", "tasks"]
    lines += [
        f"  {t['role']:<8}{t['task'][:12]:<14}{t['status']:<10}{t['health']:<10}{t['instance_type']:<14}{t['gpus']} GPU"
        for t in s["tasks"]
    ] or ["  (none running)"]
    if s.get("capacity"):  # only when instances are not coming: an empty section would be noise
        lines += ["", "capacity (the last hour: why instances are not coming)"]
        lines += [f"  {'cannot come: ' if r['fatal'] else ''}{r['reason']}" for r in s["capacity"]]
    ray = s["ray"]
    lines += ["", "ray (as the head reports it" + (f", {printable(ray.get('taken_at'))})" if ray else ")")]
    if ray and s.get("ray_stale"):
        lines.append(stale_line(s.get("ray_age_s")))
    lines += (
        render_ray(ray)
        if ray
        else [f"  no snapshot yet: the ray-control task writes one every {SNAPSHOT_INTERVAL_S} s"]
    )
    if "queue" in s:
        lines += ["", "queue", queue_line(s["queue"])]
    lines += ["", "recent runs"]
    lines += [
        f"  {printable(r['run']):<28}{printable(r['state']):<20}{printable(r['last_checkpoint'] or '-'):<22}"
        f"{printable(r['results'])}"
        for r in s["runs"]
    ] or ["  (none)"]
    unknown = f" (+ unpriced: {', '.join(s['cost_unknown_types'])})" if s["cost_unknown_types"] else ""
    lines += [
        "",
        f"cost: ${s['cost_per_hour_usd']:.2f}/hour for {len(s['instances'])} instance(s){unknown}; "
        f"prices {s['prices_as_of']}; `rayfleet stop` scales to zero",
    ]
    if s.get("running_since"):
        lines.append(f"spent: ~${s['spent_usd']:,.2f} since the instances running now started ({s['running_since']})")
    return "\n".join(lines)


def show_status(runs: int = 5, as_json: bool = False, outputs: str | None = None) -> int:
    """`rayfleet status`: one screen on the deployment (or its JSON), with the `runs` most recent runs."""
    out = Outputs.load(outputs)
    result = status(Aws(out.region), out, runs)
    print(json.dumps(result, indent=2) if as_json else render(result))
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.status", "rayfleet status")
