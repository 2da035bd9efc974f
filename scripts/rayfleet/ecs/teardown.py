"""Stop paying for the cluster: services to zero, running trainer tasks stopped, waited for with waiters.

    python -m rayfleet.ecs.teardown [--outputs FILE] [--json]       # make stop; make clean runs it first

Idempotent: safe to run twice, or on a cluster that is already at zero.
"""

from __future__ import annotations

import argparse
import json
import sys

from rayfleet.core.aws import STARTED_BY, Aws, run_cli
from rayfleet.ecs.outputs import Outputs


def running_trainer_tasks(ecs, cluster: str) -> list[str]:
    pages = ecs.get_paginator("list_tasks").paginate(cluster=cluster, startedBy=STARTED_BY, desiredStatus="RUNNING")
    return [arn for page in pages for arn in page["taskArns"]]


def teardown(aws: Aws, out: Outputs, say=print, wait_delay: int = 6, wait_attempts: int = 100) -> dict:
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    # workers first (they depend on the head), the control task last (it would scale them back... never up,
    # but it writes the snapshot until the head is gone)
    wanted = [out.worker_service_name, out.head_service_name] + [s for s in [out.control_service_name] if s]
    found = ecs.describe_services(cluster=out.cluster_name, services=wanted)["services"]
    active = {s["serviceName"] for s in found if s.get("status") == "ACTIVE"}
    services = [s for s in wanted if s in active]  # a half-done destroy may have deleted some already
    for service in wanted:
        if service not in active:
            say(f"service {service} is already gone")
    for service in services:
        say(f"scaling {service} to 0 ...")
        ecs.update_service(cluster=out.cluster_name, service=service, desiredCount=0)
    trainers = running_trainer_tasks(ecs, out.cluster_name)
    for arn in trainers:
        say(f"stopping trainer task {arn.rsplit('/', 1)[-1]} ...")
        ecs.stop_task(cluster=out.cluster_name, task=arn, reason="rayfleet teardown")
    say("waiting for services and tasks to stop ...")
    waiter_config = {"Delay": wait_delay, "MaxAttempts": wait_attempts}
    if services:
        ecs.get_waiter("services_stable").wait(cluster=out.cluster_name, services=services, WaiterConfig=waiter_config)
    if trainers:
        ecs.get_waiter("tasks_stopped").wait(cluster=out.cluster_name, tasks=trainers, WaiterConfig=waiter_config)
    return {"cluster": out.cluster_name, "services_scaled_to_zero": services, "trainer_tasks_stopped": trainers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayfleet.ecs.teardown", description=__doc__.split("\n")[0])
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    parser.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    args = parser.parse_args(argv)
    out = Outputs.load(args.outputs)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    result = teardown(Aws(out.region), out, say=say)
    if args.json:
        print(json.dumps(result))
    else:
        print(f"stopped: {len(result['trainer_tasks_stopped'])} trainer task(s); services at 0; nothing left running")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
