"""Runs beside the Ray head: writes the cluster's nodes, resources and jobs, as the head sees them, to S3.

    python -m rayfleet.node.control.head_snapshot --bucket B [--dashboard URL] [--interval 30] [--once]

On ECS it is the control task, `ray-control` (infra/modules/ray/task_definitions.tf): the head image with this
module as its entry point, in a task of its own, because its role may write cluster/ and scale the services
(autostop) and no job may: nothing Ray schedules can land in a task that runs no Ray node. It reads the head's
dashboard at http://<RAYFLEET_HEAD_HOST, else 127.0.0.1>:<dashboard port of RAYFLEET_RAY_PORTS> with the
cluster token (RAY_AUTH_TOKEN from the task's secret; else RAY_AUTH_TOKEN_PATH or the machine's token file),
and never joins the cluster as a driver (it would show up as a job). `make status` reads
`s3://B/cluster/ray-status.json`, so it shows Ray's view from a laptop that cannot reach the head (the
dashboard and GCS never leave the cluster's security group).

Each round it also applies the Serve configuration `make serve` kept (rayfleet/core/serve_kept.py) to a head that
runs none of its applications (one that started again without them), raises each worker group's service to what
the run queue needs (rayfleet/node/control/queue_scaling.py), starts the trainer of a run that waits for a driver slot
once the head instance has one (rayfleet/node/control/driver_dispatch.py), and
takes out the instance of a worker that left as suspect (a bad GPU: its drain message
names the instance, rayfleet/node/control/suspect.py), only when ECS says that instance is the one behind the dead
node's address and runs a task of a worker group's service (RAYFLEET_WORKER_GROUPS): ECS container instance
DRAINING, Auto Scaling health Unhealthy, once per instance, with this task's role (RAYFLEET_CLUSTER_NAME
names the ECS cluster). When the queue's capacity raised the workers, autostop re-arms (follow_queue).

A failed round (the head restarting, S3 away) is logged as one line and retried at the next interval.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from rayfleet.core import hung_runs, worker_groups
from rayfleet.core import serve_kept as kept
from rayfleet.core.bucket import RAY_STATUS
from rayfleet.core.launch_queue import Launches
from rayfleet.core.run_queue import Queue
from rayfleet.node.control import autostop, queue_scaling, suspect
from rayfleet.node.control.driver_dispatch import DriverDispatch
from rayfleet.serve.summary import summarize

KEY = RAY_STATUS
JOB_FIELDS = ("submission_id", "job_id", "type", "status", "start_time", "end_time", "metadata")


def say(message: str) -> None:
    print(f"head-snapshot: {message}", flush=True)


def default_dashboard(env: dict) -> str:
    ports = json.loads(env["RAYFLEET_RAY_PORTS"]) if env.get("RAYFLEET_RAY_PORTS") else {}
    host = env.get("RAYFLEET_HEAD_HOST") or "127.0.0.1"
    return f"http://{host}:{ports.get('dashboard', {}).get('from', 8265)}"


def token(env: dict) -> str:
    if env.get("RAY_AUTH_TOKEN"):
        return env["RAY_AUTH_TOKEN"].strip()
    from rayfleet.core import ray_auth

    path = env.get("RAY_AUTH_TOKEN_PATH")
    return ray_auth.read_token(Path(path) if path else None)


def _get(dashboard: str, path: str, auth: str, timeout: float = 10):
    request = urllib.request.Request(dashboard.rstrip("/") + path, headers={"Authorization": f"Bearer {auth}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.load(response)


def _put(dashboard: str, path: str, auth: str, body: dict, timeout: float = 30) -> None:
    # As `_get`: the bearer token over plain HTTP, because this task never imports Ray (whose Serve client
    # reads the token from the process environment, which this module leaves alone).
    data = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {auth}", "Content-Type": "application/json"}
    request = urllib.request.Request(dashboard.rstrip("/") + path, data=data, headers=headers, method="PUT")
    with urllib.request.urlopen(request, timeout=timeout):
        pass


def _plain(resources: dict) -> dict:
    return {k: v for k, v in resources.items() if not k.startswith("node:")}


def _camel(name: str) -> str:
    """The dashboard's cluster status camel-cases resource names (object_store_memory -> objectStoreMemory)."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def snapshot(dashboard: str, auth: str) -> dict:
    """Ray's view from the head's dashboard: every node (State API), what is used (the autoscaler's report,
    which `ray status` prints) and the jobs (Jobs API: submitted jobs and plain drivers)."""
    listed = _get(dashboard, "/api/v0/nodes?detail=1&limit=10000", auth)["data"]["result"]["result"]
    nodes = [
        {
            "node_id": n["node_id"][:12],
            "alive": n["state"] == "ALIVE",
            "head": bool(n.get("is_head_node")),
            "address": n.get("node_ip"),
            "resources": _plain(n.get("resources_total") or {}),
            **({} if n["state"] == "ALIVE" else {"message": n.get("state_message") or ""}),
        }
        for n in listed
    ]
    total: dict[str, float] = {}
    for node in nodes:
        if node["alive"]:
            for name, value in node["resources"].items():
                total[name] = total.get(name, 0.0) + value
    status = _get(dashboard, "/api/cluster_status", auth)["data"].get("clusterStatus") or {}
    usage = (status.get("loadMetricsReport") or {}).get("usage") or {}
    available = {}
    for name, value in total.items():
        used = usage.get(name) or usage.get(_camel(name))
        if used is not None:
            available[name] = max(0.0, value - used[0])
    jobs = [{k: job.get(k) for k in JOB_FIELDS} for job in _get(dashboard, "/api/jobs/", auth)]
    alive = "/api/v0/actors?limit=10000&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
    # Markers with the job Ray records as their maker: autostop takes one only for that job (hung_runs.held).
    markers = hung_runs.markers(_get(dashboard, alive, auth)["data"]["result"]["result"])
    unfinished = [j for j in jobs if j.get("status") in autostop.UNFINISHED_JOBS]
    hung = sorted(m["run"] for m in hung_runs.held(markers, unfinished))
    jobs.sort(key=lambda j: j.get("start_time") or 0, reverse=True)
    try:  # Serve's applications (make serve); the dashboard answers with none when Serve never started
        serve = summarize(_get(dashboard, "/api/serve/applications/", auth))
    except (OSError, ValueError, KeyError) as exc:
        serve = [{"name": "?", "status": f"unknown ({exc})", "route_prefix": "", "message": "", "deployments": []}]
    return {
        "taken_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "nodes": nodes,
        "total": total,
        "available": available,
        "jobs": jobs,
        "hung_runs": hung,
        "hung_markers": markers,
        "serve": serve,
    }


def restore_serve(s3, bucket: str, dashboard: str, auth: str, taken: dict) -> dict | None:
    """The kept Serve configuration (None: nothing is served), applied again through Serve's REST API (the
    same PUT `make serve` makes) when the head runs none of its applications; never while Serve's state is
    unknown. A failure is shown, never fatal: the next round tries again."""
    try:
        record = kept.kept(s3, bucket)
        if record is None:
            return None
        lacking = [] if any(a["name"] == "?" for a in taken["serve"]) else kept.missing(record, taken["serve"])
        if lacking:
            _put(dashboard, "/api/serve/applications/", auth, record["config"])
            say(f"serve: the head runs none of {', '.join(lacking)}: applied run {record['run']}'s kept config")
        return {"run": record["run"], "applications": kept.app_names(record["config"]), "reapplied": lacking}
    except Exception as exc:  # S3 or the dashboard away: say so, try again next round
        say(f"serve: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def decide(stopper: autostop.Autostop | None, taken: dict) -> dict | None:
    """What autostop makes of this snapshot (None: off); a failure to decide is shown, never fatal."""
    if stopper is None:
        return None
    try:
        return stopper.tick(taken)
    except Exception as exc:  # ECS away or refusing: say so in the snapshot, try again next round
        say(f"autostop: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def guarded(name: str, round_of, *args) -> dict | None:
    """One round of the queue's capacity or the driver dispatch (None: not on ECS, or nothing to do), given
    `args` (the queue's: this round's snapshot, whose unfinished jobs are the live runs); a failure is shown,
    never fatal."""
    if round_of is None:
        return None
    try:
        return round_of.tick(*args)
    except Exception as exc:  # S3 or ECS away: say so, try again next round
        say(f"{name}: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def queue_follower(env: dict, bucket: str, ecs) -> queue_scaling.QueueScaling | None:
    groups = worker_groups.ecs_groups_from(env)
    cluster = env.get("RAYFLEET_CLUSTER_NAME")
    if not groups or not cluster:
        return None
    # env: the operator's priority ceiling (RAYFLEET_MAX_PRIORITY) is this task's, never a queue entry's
    return queue_scaling.QueueScaling(Queue(f"s3://{bucket}"), groups, ecs, cluster, say=say, env=env)


def driver_dispatch(env: dict, bucket: str, ecs) -> DriverDispatch | None:
    cluster = env.get("RAYFLEET_CLUSTER_NAME")
    return DriverDispatch(Launches.of_bucket(bucket), ecs, cluster, say=say) if cluster else None


MOST_SUSPECTS_PER_ROUND = 4  # dead nodes looked up in ECS in one round: a job can leave many behind


def replace_suspects(taken: dict, cluster: str | None, aws, done: set[str], workers: list[str]) -> list[str]:
    """Take out the instances of dead worker nodes that drained as suspect, each once (`done` remembers the
    dead nodes judged and the instances taken out): only when ECS says the instance the message names is the
    one behind the node's own address and runs a task of the `workers` services (suspect.worker_instance_at).
    What was done or refused, one line per action, also said in the log."""
    lines = []
    looked = 0
    for node in taken["nodes"]:
        instance = suspect.named_instance(node.get("message"))
        key = f"node:{node.get('node_id')}"
        if instance is None or node.get("alive") or not cluster or key in done or instance in done:
            continue
        if looked >= MOST_SUSPECTS_PER_ROUND:
            break  # the rest next round
        looked += 1
        done.add(key)
        if node.get("head"):
            accepted, why = False, "it is the head"
        else:
            accepted, why = suspect.worker_instance_at(node.get("address"), instance, cluster, workers, aws)
        if not accepted:
            line = f"suspect node {node['node_id']} names {instance}: not taken out: {why}"
            say(line)
            lines.append(line)
            continue
        done.add(instance)
        for line in suspect.take_out(instance, cluster, aws):
            say(f"suspect node {node['node_id']}: {line}")
            lines.append(line)
    return lines


def follow_queue(stopper: autostop.Autostop | None, capacity: dict | None) -> None:
    """The queue's capacity raised a group's workers: autostop re-arms it, so it stops them again once idle."""
    if stopper is None or not capacity:
        return
    for group, asked in capacity.items():
        if isinstance(asked, dict) and "raised_from" in asked:
            why = f"the queue raised {group}'s workers from {asked['raised_from']} to {asked.get('desired')}"
            stopper.rearm(why, [group])


def main(argv: list[str] | None = None, env: dict | None = None) -> int:
    env = dict(os.environ if env is None else env)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bucket", required=True)
    parser.add_argument("--dashboard", default=None, help="default: RAYFLEET_HEAD_HOST or 127.0.0.1")
    parser.add_argument("--interval", type=float, default=30.0)
    parser.add_argument("--once", action="store_true", help="one snapshot; exit 1 when it fails")
    args = parser.parse_args(argv)
    dashboard = args.dashboard or default_dashboard(env)

    from rayfleet.core.aws import Aws

    aws = Aws()
    s3 = aws.client("s3")
    replaced: set[str] = set()
    workers = [g.service for g in worker_groups.ecs_groups_from(env).values()]  # whose instances may be taken out
    auth = token(env)
    say(f"every {args.interval:g}s: {dashboard} -> s3://{args.bucket}/{KEY}")
    settings = autostop.Settings.from_env(env)
    ecs = aws.client("ecs")
    stopper = autostop.Autostop(settings, ecs, say=say) if settings else None
    follower = queue_follower(env, args.bucket, ecs)
    dispatcher = driver_dispatch(env, args.bucket, ecs)
    if settings:
        said = ", ".join(f"{name} after {g.idle_s / 60:g}" for name, g in settings.groups.items())
        say(f"autostop, idle minutes per worker group: {said}" + ("; the head last" if settings.stop_head else ""))
    written = 0
    while True:
        try:
            taken = snapshot(dashboard, auth)
            taken["serve_kept"] = restore_serve(s3, args.bucket, dashboard, auth, taken)
            # an entry counts only while its run has an unfinished Ray job in this very snapshot
            taken["queue_capacity"] = guarded("queue", follower, taken)
            follow_queue(stopper, taken["queue_capacity"])
            taken["launches"] = guarded("launches", dispatcher)
            taken["autostop"] = decide(stopper, taken)
            taken["replaced"] = replace_suspects(taken, env.get("RAYFLEET_CLUSTER_NAME"), aws, replaced, workers)
            body = json.dumps(taken, indent=2).encode()
            s3.put_object(Bucket=args.bucket, Key=KEY, Body=body, ContentType="application/json")
            if written == 0:
                say("first snapshot written")
            written += 1
        except Exception as exc:  # one line, and the next round tries again: the head may be restarting
            say(f"no snapshot this round: {type(exc).__name__}: {exc}")
            if args.once:
                return 1
        if args.once:
            return 0
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
