"""Capacity follows the queue, decided beside the head (the control task, rayfleet/node/control/head_snapshot.py).

Each round it reads the deployment's run queue (s3://<results bucket>/queue/: rayfleet/core/run_queue.py) and
raises the worker service to what the admitted and running runs and the first waiting run take together, in
worker nodes of the deployment's shape (RAYFLEET_WORKER_NODE: vcpus, gpus, memory_mib and count, the worker
group's maximum), never above that maximum. So the run at the front of the queue gets its nodes even when
the submitter that would have started them (`make run`'s bring-up) asked for fewer, or for a cluster that
autostop has since scaled down. It never lowers the count: a run may be using what it does not need any
more, and scaling down is autostop's (rayfleet/node/control/autostop.py), for which a queued run is work (its trainer
task waits, and so does its Ray job). A held run (the queue's budget) asks for nothing.

The entries are written by the runs' jobs, so this privileged reader trusts none of them as written
(rayfleet/core/run_queue_checks.py): an entry that is not one the admission writes is ignored with one
warning; with the round's snapshot of Ray's jobs (`tick(snapshot)`), an entry counts only while the run it
names has an unfinished Ray job, so a forged or left-over entry cannot keep the GPU workers up; and a
priority above RAYFLEET_MAX_PRIORITY (this task's environment, an operator's setting: default 9, the
recipes' highest) is clamped to it. A job can still raise the workers for its own live run up to the
group's maximum, which `make run` from a laptop can do anyway; the control role only reads queue/.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping

from rayfleet.core.run_queue import ADMITTED, RUNNING, Entry, Queue, waiting
from rayfleet.core.run_queue_checks import Alive, max_priority_from
from rayfleet.recipes.fit import Capacity, nodes_for

NODE_VAR = "RAYFLEET_WORKER_NODE"  # {"vcpus", "gpus", "memory_mib", "count"}: the worker tasks' shape (Terraform)


def shape_from(env: dict) -> Capacity | None:
    """The worker node as the control task's environment gives it; None outside ECS."""
    if not env.get(NODE_VAR):
        return None
    node = json.loads(env[NODE_VAR])
    memory = node.get("memory_mib")
    return Capacity(
        "the ECS workers", float(node["vcpus"]), int(node["gpus"]), memory / 1024 if memory else None, node["count"]
    )


def nodes_of(entry: Entry, shape: Capacity) -> int:
    return nodes_for(entry.workers, entry.cpus_per_worker, entry.gpus_per_worker, entry.one_per_node, shape)


def wanted(entries: list[Entry], shape: Capacity) -> tuple[int, str] | None:
    """Worker nodes the queue needs now, and for what (one line); None when no run waits."""
    line = waiting(entries)
    if not line:
        return None
    first = line[0]
    running = [e for e in entries if e.state in (ADMITTED, RUNNING)]
    need = sum(nodes_of(e, shape) for e in running) + nodes_of(first, shape)
    most = shape.nodes if shape.nodes is not None else need
    why = f"{first.run} waits for {nodes_of(first, shape)} node(s)" + (
        f" beside {len(running)} running run(s)" if running else ""
    )
    return min(need, most), why


class QueueScaling:
    def __init__(
        self,
        queue: Queue,
        shape: Capacity,
        ecs,
        cluster: str,
        worker_service: str,
        clock: Callable[[], float] = time.time,
        say=print,
        env: Mapping[str, str] | None = None,
    ):
        self.queue, self.shape, self.ecs, self.clock, self.say = queue, shape, ecs, clock, say
        self.cluster, self.worker_service = cluster, worker_service
        queue.max_priority = max_priority_from(os.environ if env is None else env)  # the operator's, not a job's
        queue.warn = say

    def tick(self, snapshot: dict | None = None) -> dict:
        """One round: what the queue needs, and the worker service raised to it if it has fewer. `snapshot`:
        this round's view of Ray (rayfleet/node/control/head_snapshot.py), whose unfinished jobs are the live runs;
        without it every fresh, valid entry counts."""
        alive = Alive.of(snapshot.get("jobs") or []) if snapshot is not None else None
        entries, ignored = self.queue.scan(self.clock(), alive)
        shown = {"ignored": len(ignored)} if ignored else {}
        need = wanted(entries, self.shape)
        if need is None:
            return {"wanted": None, **shown}
        nodes, why = need
        found = self.ecs.describe_services(cluster=self.cluster, services=[self.worker_service])["services"]
        desired = found[0]["desiredCount"] if found else 0
        if nodes <= desired:
            return {"wanted": nodes, "desired": desired, "why": why, **shown}
        self.ecs.update_service(cluster=self.cluster, service=self.worker_service, desiredCount=nodes)
        self.say(f"queue: {why}: {self.worker_service} {desired} -> {nodes}")
        return {"wanted": nodes, "desired": nodes, "why": why, "raised_from": desired, **shown}
