"""Capacity follows the queue, decided beside the head (the control task, rayfleet/node/control/head_snapshot.py).

Each round it reads the deployment's run queue (s3://<results bucket>/queue/: rayfleet/core/run_queue.py) and
raises each worker group's service to what the admitted and running runs on that group and the group's first
waiting run take together, in nodes of the group's shape (RAYFLEET_WORKER_GROUPS, rayfleet/core/worker_groups.py:
vcpus, gpus, memory_mib and the group's max), never above that maximum; a run on one group never raises
another. So the run at the front of the queue gets its nodes even when
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

import os
import time
from collections.abc import Callable, Mapping

from rayfleet.core.run_queue import ADMITTED, RUNNING, Entry, Queue, waiting
from rayfleet.core.run_queue_checks import Alive, max_priority_from
from rayfleet.core.worker_groups import EcsGroup
from rayfleet.recipes.fit import Capacity, nodes_for


def capacity_of(group: EcsGroup) -> Capacity:
    """One node of the group, with the group's most nodes."""
    memory = group.memory_mib / 1024 if group.memory_mib else None
    return Capacity(f"worker group {group.name}", group.vcpus, group.gpus, memory, group.max)


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


def on_group(entries: list[Entry], group: str, groups: int) -> list[Entry]:
    """The entries whose workers go to `group`: those on it, and with a deployment of one group, those on none.
    A run on no group in a deployment of several (it spans them) was started by its submitter."""
    return [e for e in entries if e.group == group or (not e.group and groups == 1)]


class QueueScaling:
    def __init__(
        self,
        queue: Queue,
        groups: dict[str, EcsGroup],
        ecs,
        cluster: str,
        clock: Callable[[], float] = time.time,
        say=print,
        env: Mapping[str, str] | None = None,
    ):
        self.queue, self.groups, self.ecs, self.clock, self.say = queue, groups, ecs, clock, say
        self.cluster = cluster
        queue.max_priority = max_priority_from(os.environ if env is None else env)  # the operator's, not a job's
        queue.warn = say

    def tick(self, snapshot: dict | None = None) -> dict:
        """One round: per group, what its line of the queue needs, and its worker service raised to it if it has
        fewer. `snapshot`: this round's view of Ray (rayfleet/node/control/head_snapshot.py), whose unfinished
        jobs are the live runs; without it every fresh, valid entry counts."""
        alive = Alive.of(snapshot.get("jobs") or []) if snapshot is not None else None
        entries, ignored = self.queue.scan(self.clock(), alive)
        shown = {"ignored": len(ignored)} if ignored else {}
        return {
            name: {**self.scale(group, on_group(entries, name, len(self.groups))), **shown}
            for name, group in self.groups.items()
        }

    def scale(self, group: EcsGroup, entries: list[Entry]) -> dict:
        """The group's line: its live runs (autostop's measure of use), and its service raised to what they need."""
        runs = {"runs": len(entries)} if entries else {}
        need = wanted(entries, capacity_of(group))
        if need is None:
            return {"wanted": None, **runs}
        nodes, why = need
        found = self.ecs.describe_services(cluster=self.cluster, services=[group.service])["services"]
        desired = found[0]["desiredCount"] if found else 0
        if nodes <= desired:
            return {"wanted": nodes, "desired": desired, "why": why, **runs}
        self.ecs.update_service(cluster=self.cluster, service=group.service, desiredCount=nodes)
        self.say(f"queue: {why}: {group.service} {desired} -> {nodes}")
        return {"wanted": nodes, "desired": nodes, "why": why, "raised_from": desired, **runs}
