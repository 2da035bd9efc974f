"""The rehearsal's agent reads its containers' states from `podman ps` (tools/rehearsal/agent.py
_observe_containers): a container that exited stops its task when it is essential, and a failed listing
concludes nothing. `podman ps` fails now and then while any container on the host is being removed
(containers/podman#11810); read as an empty listing, every running container looked gone and the agent stopped
every task (the rehearsal test that once found one sidecar where two run). podman is a recording stand-in."""

from __future__ import annotations

import json
import subprocess
import threading

from tools.rehearsal import agent as agent_module
from tools.rehearsal.agent import Agent, ContainerRun, TaskRun


def agent_with(task: TaskRun) -> Agent:
    found = Agent.__new__(Agent)  # the observation alone: no moto, no ECS
    found.rid, found.tasks, found.lock = "r1", {task.arn: task}, threading.Lock()
    found.stopped = []
    found.stop_task = lambda run, reason, in_moto: found.stopped.append((run.short, reason))
    return found


def worker_task() -> TaskRun:
    containers = {
        "ray-worker": ContainerRun(
            {"name": "ray-worker", "essential": True}, "rf-r1-worker-aaaa-ray-worker", "RUNNING"
        ),
        "gpu-metrics": ContainerRun(
            {"name": "gpu-metrics", "essential": False}, "rf-r1-worker-aaaa-gpu-metrics", "RUNNING"
        ),
    }
    return TaskRun(
        "arn:aws:ecs:us-east-1:1:task/c/aaaa1111", "worker", "w", "rf-r1-worker-aaaa", containers, status="RUNNING"
    )


def listing(monkeypatch, returncode: int, entries: list[dict]) -> None:
    def podman(*args, **kwargs):
        return subprocess.CompletedProcess(["podman", *args], returncode, json.dumps(entries), "no such container")

    monkeypatch.setattr(agent_module.podman, "podman", podman)


def test_a_failed_listing_stops_nothing_and_a_real_exit_stops_the_task(monkeypatch):
    task = worker_task()
    found = agent_with(task)
    listing(monkeypatch, 125, [])  # `podman ps` raced a removal elsewhere on the host
    found._observe_containers()
    assert found.stopped == [] and {c.state for c in task.containers.values()} == {"RUNNING"}
    running = {"Names": ["rf-r1-worker-aaaa-gpu-metrics"], "State": "running"}
    exited = {"Names": ["rf-r1-worker-aaaa-ray-worker"], "State": "exited", "ExitCode": 137}
    listing(monkeypatch, 0, [running, exited])
    found._observe_containers()
    assert found.stopped == [("worker aaaa1111", "Essential container in task exited (ray-worker: exit 137)")]
    assert task.containers["gpu-metrics"].state == "RUNNING"
