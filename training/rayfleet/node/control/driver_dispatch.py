"""Runs waiting for a driver slot get one, decided beside the head (the control task,
rayfleet/node/control/head_snapshot.py).

Each round it sends the first pending launch's RunTask again (rayfleet/core/launch_queue.py: the request `make
run` made when every driver share of the head instance was taken), and when ECS places it, moves the launch
with the task's ARN to `started/`, where the submitter (`make run`, `make logs`) finds it. Only the first one
is tried, so the order is the queue's; one that names another cluster is never sent. The role's RunTask is
limited to the deployment's trainer task definitions on its cluster (infra/modules/iam).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from rayfleet.core.launch_queue import Launches, Pending


def refusal(response: dict) -> str:
    failures = response.get("failures") or []
    reasons = [f"{f.get('reason', '?')}" + (f" ({f['detail']})" if f.get("detail") else "") for f in failures]
    return "ECS placed no task: " + ("; ".join(reasons) or "no reason given")


class DriverDispatch:
    def __init__(self, launches: Launches, ecs, cluster: str, clock: Callable[[], float] = time.time, say=print):
        self.launches, self.ecs, self.cluster, self.clock, self.say = launches, ecs, cluster, clock, say

    def tick(self) -> dict | None:
        """One round: None when no run waits for a driver slot; else what became of the first one."""
        line = self.launches.waiting()
        if not line:
            return None
        first = line[0]
        summary = {"first": first.run, "waiting": len(line)}
        if first.request.get("cluster") != self.cluster:
            return {**summary, "why": self.refuse(first, f"names cluster {first.request.get('cluster')!r}, not ours")}
        response = self.ecs.run_task(**first.request)
        first.tries += 1
        tasks = response.get("tasks") or []
        if not tasks:
            return {**summary, "why": self.refuse(first, refusal(response))}
        first.task_arn, first.started_at, first.why = tasks[0]["taskArn"], self.clock(), ""
        self.launches.placed(first)
        waited = round(first.started_at - first.submitted_at)
        self.say(f"launches: {first.run}'s trainer placed after {waited} s and {first.tries} tries: {first.task_arn}")
        return {**summary, "started": first.task_arn, "waiting": len(line) - 1}

    def refuse(self, pending: Pending, why: str) -> str:
        if why != pending.why:  # written when it changes; `tries` shows the rounds in between at the next change
            pending.why = why
            self.launches.put(pending)
        return why
