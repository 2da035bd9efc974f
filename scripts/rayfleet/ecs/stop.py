"""Stop paying for the cluster: services to zero, running trainer tasks stopped, waited for with waiters.

    rayfleet deploy stop [--outputs FILE] [--json] [--group G]   # rayfleet deploy down runs it first

Idempotent: safe to run twice, or on a cluster that is already at zero.
"""

from __future__ import annotations

import json
import sys

from rayfleet.core.aws import STARTED_BY, Aws
from rayfleet.core.moved import gone
from rayfleet.ecs.fallback import back_to_spot
from rayfleet.ecs.outputs import Outputs


def running_trainer_tasks(ecs, cluster: str) -> list[str]:
    pages = ecs.get_paginator("list_tasks").paginate(cluster=cluster, startedBy=STARTED_BY, desiredStatus="RUNNING")
    return [arn for page in pages for arn in page["taskArns"]]


def scale_to_zero(
    aws: Aws, out: Outputs, say=print, wait_delay: int = 6, wait_attempts: int = 100, group: str | None = None
) -> dict:
    """Every service to zero and the trainer tasks stopped; with `group`, that worker group's service alone."""
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    # workers first (they depend on the head), the control task last (it would scale them back... never up,
    # but it writes the snapshot until the head is gone)
    if group is not None:
        wanted = [out.group(group).service_name]
    else:
        wanted = [*out.worker_service_names, out.head_service_name] + [s for s in [out.control_service_name] if s]
    found = ecs.describe_services(cluster=out.cluster_name, services=wanted)["services"]
    active = {s["serviceName"] for s in found if s.get("status") == "ACTIVE"}
    services = [s for s in wanted if s in active]  # a half-done destroy may have deleted some already
    for service in wanted:
        if service not in active:
            say(f"service {service} is already gone")
    for service in services:
        say(f"scaling {service} to 0 ...")
        ecs.update_service(cluster=out.cluster_name, service=service, desiredCount=0)
    trainers = running_trainer_tasks(ecs, out.cluster_name) if group is None else []  # runs elsewhere go on
    for arn in trainers:
        say(f"stopping trainer task {arn.rsplit('/', 1)[-1]} ...")
        ecs.stop_task(cluster=out.cluster_name, task=arn, reason="rayfleet deploy stop")
    back_to_spot(aws, out, say, only=group)  # what a run's capacity fallback switched to on-demand
    say("waiting for services and tasks to stop ...")
    waiter_config = {"Delay": wait_delay, "MaxAttempts": wait_attempts}
    if services:
        ecs.get_waiter("services_stable").wait(cluster=out.cluster_name, services=services, WaiterConfig=waiter_config)
    if trainers:
        ecs.get_waiter("tasks_stopped").wait(cluster=out.cluster_name, tasks=trainers, WaiterConfig=waiter_config)
    return {"cluster": out.cluster_name, "services_scaled_to_zero": services, "trainer_tasks_stopped": trainers}


def stop_deployment(as_json: bool = False, outputs: str | None = None, group: str | None = None) -> int:
    """`rayfleet deploy stop`: trainer tasks stopped, services at zero (`group`: that worker group alone); `as_json`:
    the result on stdout, progress on stderr."""
    out = Outputs.load(outputs)
    say = (lambda *a: print(*a, file=sys.stderr)) if as_json else print
    result = scale_to_zero(Aws(out.region), out, say=say, group=group)
    if as_json:
        print(json.dumps(result))
    elif group is not None:
        print(f"stopped: worker group {group} at 0; the head and the other groups go on")
    else:
        print(f"stopped: {len(result['trainer_tasks_stopped'])} trainer task(s); services at 0; nothing left running")
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ecs.stop", "rayfleet deploy stop")
