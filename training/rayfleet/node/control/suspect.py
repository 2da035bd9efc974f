"""A worker whose GPU went bad leaves, and its instance is replaced, before the next run is placed on it.

The gpu-metrics sidecar (monitoring/node_health.py) writes `suspect.json` into the worker task's node-health
volume (RAYFLEET_HEALTH_DIR) when a GPU reports an uncorrectable ECC error or falls off the bus; the hang
watchdog (rayfleet/train/control/hang_watch.py) writes one into the current-run directory (RAYFLEET_CURRENT_RUN_DIR)
for a rank that did not arrive. The file's format is the contract, with no import between the writers and
this reader (as for the current-run files):

    {"reasons": ["GPU 3 (NVIDIA H100 80GB HBM3): 2 uncorrectable ECC error(s)"], "since": "<ISO time>"}

The worker's entry point (rayfleet/node/ray_node.py) looks every 5 s, as for a Spot notice. On a suspect
file it drains its Ray node with the PREEMPTION reason (Ray schedules nothing new there, Ray Train jobs
checkpoint and move, launcher recipes get their notice) and a message naming its instance (`reason`), and
stops Ray once the node's work is gone or the deadline passes. The control task beside the head
(rayfleet/node/control/head_snapshot.py), whose role alone may touch the deployment (no job can use it), finds the
node dead with that message and takes the instance out (`take_out`): its ECS container instance goes
DRAINING (ECS places no task there) and its Auto Scaling group is told it is Unhealthy (the group terminates
and replaces it). Locally there is no instance: the drain alone keeps new work off the node.

Any job can drain any node with any message (it holds the cluster's token), so the message is a request,
never the instance to act on. The control task takes out an instance only when ECS says it is the one behind
the dead node's own address (Ray's record of the node, not the message) and runs a task of a worker service
(`worker_instance_at`): the head's instance, another deployment's, or a worker the node never ran on is
refused with one line. A job can so get a worker instance of this deployment replaced, no other instance
(its role's SetInstanceHealth names the worker groups' Auto Scaling groups only: infra/modules/iam).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

FILE = "suspect.json"
# In the drain's message, and so in the dead node's state message Ray keeps: which instance to take out.
NAMED = re.compile(r"node suspect on (i-[0-9a-f]+): ")


def read(health_dir: str | Path | None) -> dict | None:
    """The suspect file's content, or None (no file, no directory, or a half-written file: asked again later)."""
    if not health_dir:
        return None
    try:
        found = json.loads((Path(health_dir) / FILE).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("reasons") else None


MOST_REASON = 1000  # characters of the reasons in a drain message: a job can write suspect.json on its node


def reason(found: dict, instance: str | None = None) -> str:
    """The drain's message: the reasons, and the instance when known (on ECS), for the control task. The
    instance comes first, from the host's identity file; the reasons (a job may have written them) are
    bounded, and the control task believes neither without ECS (worker_instance_at)."""
    where = f" on {instance}" if instance and re.fullmatch(r"i-[0-9a-f]{1,32}", instance) else ""
    reasons = found["reasons"] if isinstance(found["reasons"], list) else [found["reasons"]]
    return f"node suspect{where}: " + "; ".join(str(r) for r in reasons)[:MOST_REASON]


def named_instance(message: str | None) -> str | None:
    """The instance a dead node's state message names as suspect, or None."""
    found = NAMED.search(message or "")
    return found.group(1) if found else None


def instance_id(identity_file: str | Path) -> str | None:
    """This instance's id from the file the host writes at boot (no container may reach IMDS)."""
    try:
        return json.loads(Path(identity_file).read_text()).get("instance_id") or None
    except (OSError, ValueError):
        return None


def container_instances_of(ecs, cluster: str, instance: str) -> list[str]:
    """The ECS container instance(s) on EC2 instance `instance`: read from every container instance's
    description, not ECS's query filter (which stand-ins such as moto ignore, matching every instance)."""
    arns = []
    for page in ecs.get_paginator("list_container_instances").paginate(cluster=cluster):
        for start in range(0, len(page["containerInstanceArns"]), 100):  # describe takes 100 at a time
            chunk = page["containerInstanceArns"][start : start + 100]
            described = ecs.describe_container_instances(cluster=cluster, containerInstances=chunk)
            found = described["containerInstances"]
            arns += [c["containerInstanceArn"] for c in found if c["ec2InstanceId"] == instance]
    return arns


def _described_tasks(ecs, cluster: str, services: list[str]) -> list[dict]:
    """The worker services' tasks, running and recently stopped (the dead node's own task has usually stopped):
    only those whose group ECS gives as the service's (moto ignores ListTasks' serviceName filter)."""
    found = []
    for service in services:
        arns = []
        for status in ("RUNNING", "STOPPED"):
            pages = ecs.get_paginator("list_tasks").paginate(cluster=cluster, serviceName=service, desiredStatus=status)
            arns += [arn for page in pages for arn in page["taskArns"]]
        for start in range(0, len(arns), 100):  # describe takes 100 at a time
            tasks = ecs.describe_tasks(cluster=cluster, tasks=arns[start : start + 100])["tasks"]
            found += [t for t in tasks if t.get("group") == f"service:{service}" and t.get("containerInstanceArn")]
    return found


def _task_addresses(task: dict) -> set[str]:
    """The task's own addresses (awsvpc: its network interface); empty in host mode, where the node has the
    instance's address."""
    return {
        detail["value"]
        for attachment in task.get("attachments") or []
        if attachment.get("type") == "ElasticNetworkInterface"
        for detail in attachment.get("details") or []
        if detail.get("name") == "privateIPv4Address" and detail.get("value")
    }


def _instance_addresses(aws, instances: list[str]) -> dict[str, set[str]]:
    """EC2 instance -> its private addresses (host mode: the Ray node listens on the instance's)."""
    found: dict[str, set[str]] = {}
    if not instances:
        return found
    for reservation in aws.client("ec2").describe_instances(InstanceIds=instances)["Reservations"]:
        for instance in reservation["Instances"]:
            ips = {instance.get("PrivateIpAddress")} | {
                a.get("PrivateIpAddress")
                for n in instance.get("NetworkInterfaces") or []
                for a in n.get("PrivateIpAddresses") or []
            }
            found[instance["InstanceId"]] = {ip for ip in ips if ip}
    return found


def worker_instance_at(address: str | None, named: str, cluster: str, services: list[str], aws) -> tuple[bool, str]:
    """Whether `named` (the instance a dead node's message names) is, by ECS, the instance of a worker service's
    task at the node's `address`; and why not (one line)."""
    if not address or not services:
        return False, "the dead node has no address" if not address else "no worker service to look in"
    ecs = aws.client("ecs")
    tasks = _described_tasks(ecs, cluster, services)
    arns = sorted({t["containerInstanceArn"] for t in tasks})
    ec2_of: dict[str, str] = {}
    for start in range(0, len(arns), 100):
        described = ecs.describe_container_instances(cluster=cluster, containerInstances=arns[start : start + 100])
        ec2_of.update({c["containerInstanceArn"]: c["ec2InstanceId"] for c in described["containerInstances"]})
    host_mode = sorted(
        {
            ec2_of[t["containerInstanceArn"]]
            for t in tasks
            if not _task_addresses(t) and t["containerInstanceArn"] in ec2_of
        }
    )
    by_ip = _instance_addresses(aws, host_mode)
    behind = {
        ec2_of.get(t["containerInstanceArn"])
        for t in tasks
        if address in (_task_addresses(t) or by_ip.get(ec2_of.get(t["containerInstanceArn"]), set()))
    } - {None}
    if not behind:
        return False, f"no task of {', '.join(services)} has address {address}: not a worker of this deployment"
    if named not in behind:
        return False, f"the message names {named}, but the worker at {address} ran on {', '.join(sorted(behind))}"
    return True, ""


def take_out(instance: str, cluster: str, aws) -> list[str]:
    """Drain the instance's ECS container instance and mark the instance Unhealthy in its Auto Scaling group;
    a line per action, saying what was done or why not (each is tried whatever the other did)."""
    done = []
    ecs = aws.client("ecs")
    try:
        arns = container_instances_of(ecs, cluster, instance)
        if arns:
            ecs.update_container_instances_state(cluster=cluster, containerInstances=arns, status="DRAINING")
            done.append(f"ECS container instance of {instance} set DRAINING")
        else:
            done.append(f"no ECS container instance of {instance} in cluster {cluster}")
    except Exception as exc:  # one line in the log; the Auto Scaling step still runs
        done.append(f"could not drain {instance} in ECS: {type(exc).__name__}: {exc}")
    try:
        aws.client("autoscaling").set_instance_health(
            InstanceId=instance, HealthStatus="Unhealthy", ShouldRespectGracePeriod=False
        )
        done.append(f"{instance} marked Unhealthy: its Auto Scaling group replaces it")
    except Exception as exc:
        done.append(f"could not mark {instance} Unhealthy: {type(exc).__name__}: {exc}")
    return done
