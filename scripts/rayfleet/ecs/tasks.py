"""The cluster's running tasks by role: head, worker, control (by their service group) and trainer (by startedBy).

One ListTasks and batched DescribeTasks instead of one call per service: ECS gives every service task the
group `service:<name>`, and the launch verb starts trainers with startedBy=rayfleet.
"""

from __future__ import annotations

from rayfleet.core.aws import STARTED_BY
from rayfleet.ecs.outputs import Outputs


def running_tasks(ecs, out: Outputs) -> dict[str, list[dict]]:
    """{"head": [...], "worker": [...], "control": [...], "trainer": [...]}, each oldest first."""
    pages = ecs.get_paginator("list_tasks").paginate(cluster=out.cluster_name, desiredStatus="RUNNING")
    arns = [arn for page in pages for arn in page["taskArns"]]
    roles = {f"service:{out.head_service_name}": "head"} | {f"service:{s}": "worker" for s in out.worker_service_names}
    if out.control_service_name:
        roles[f"service:{out.control_service_name}"] = "control"
    by_role: dict[str, list[dict]] = {"head": [], "worker": [], "control": [], "trainer": []}
    for start in range(0, len(arns), 100):  # DescribeTasks takes at most 100
        for task in ecs.describe_tasks(cluster=out.cluster_name, tasks=arns[start : start + 100])["tasks"]:
            role = roles.get(task.get("group", "")) or ("trainer" if task.get("startedBy") == STARTED_BY else None)
            if role:
                by_role[role].append(task)
    for tasks in by_role.values():
        tasks.sort(key=lambda t: str(t.get("startedAt") or t.get("createdAt") or ""))
    return by_role


def task_state(ecs, out: Outputs, task_arn: str) -> str:
    """A trainer task's state as a run state: PROVISIONING..RUNNING, SUCCEEDED or FAILED (exit N)."""
    tasks = ecs.describe_tasks(cluster=out.cluster_name, tasks=[task_arn]).get("tasks", [])
    if not tasks:
        return "UNKNOWN"
    task = tasks[0]
    code = next(
        (c.get("exitCode") for c in task.get("containers", []) if c["name"] == out.trainer_container_name), None
    )
    if task["lastStatus"] == "STOPPED":
        return "SUCCEEDED" if code == 0 else f"FAILED (exit {code})"
    return task["lastStatus"]
