"""A worker node that joins the session's local cluster the way an ECS worker task does (the entry point,
`python -m rayfleet.node.ray_node worker`), and what its end looks like in Ray: for the tests of nodes that
leave (tests/integration/test_preemption_on_local_cluster.py, test_hang_on_local_cluster.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.helpers import DASHBOARD_PORT, RAY_PORT, REPO, listed_nodes

DEADLINE_S = 15  # seconds a drained node gives its work: short, since the restart waits for it
# Ray Train's elastic runs size themselves from Ray's autoscaling coordinator, which reads the cluster's nodes
# once per 20 s tick (ray.data's DefaultAutoscalingCoordinator.TICK_INTERVAL_S in Ray 2.60): a run started
# sooner after a node joined counts without it (then packs its smaller group onto that node).
COORDINATOR_TICK_S = 21


def entry_point_node(cluster_env: dict, scratch: Path, log: Path, **extra: str) -> subprocess.Popen:
    """The entry point with 2 CPUs (Ray Train packs a run's two workers onto it), draining with DEADLINE_S;
    `extra`: more of the task's environment."""
    ports = {"gcs": {"from": RAY_PORT, "to": RAY_PORT}, "dashboard": {"from": DASHBOARD_PORT, "to": DASHBOARD_PORT}}
    env = {
        **cluster_env,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # `ray` of this environment
        "PYTHONPATH": str(REPO),  # the run's workers import rayfleet/train/ (the image has it installed)
        "RAYFLEET_HEAD_HOST": "127.0.0.1",
        "RAYFLEET_RAY_PORTS": json.dumps(ports),
        "RAYFLEET_NUM_CPUS": "2",
        "RAYFLEET_NUM_GPUS": "0",
        "RAYFLEET_OBJECT_STORE_MIB": "200",
        "RAYFLEET_DRAIN_DEADLINE_S": str(DEADLINE_S),
        "RAYFLEET_SPOT_NOTICE_FILE": str(scratch / "spot-action.json"),
        **extra,
    }
    with open(log, "w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "rayfleet.node.ray_node", "worker"],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for(predicate, timeout: float, what: str, job: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert job.poll() is None, f"the run ended before {what}: {job.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        time.sleep(0.5)


def wait_until_idle(cluster_env: dict, cpus: float, timeout: float = 180, joined: float | None = None) -> None:
    """Until Ray reports `cpus` CPUs in the cluster and none of them in use: a joining node has registered
    and the previous test's actors have given theirs back. An elastic run takes what is free when it starts,
    so one started sooner may start smaller than the test means (on a loaded two-core host, 5 s was not
    always enough). `joined`: when a node joined (time.monotonic()); then also until COORDINATOR_TICK_S after it,
    so that Ray's elastic sizing counts that node."""
    ray = str(Path(sys.executable).parent / "ray")
    deadline, usage = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        status = subprocess.run(
            [ray, "status", f"--address=127.0.0.1:{RAY_PORT}"], env=cluster_env, capture_output=True, text=True
        )
        usage = re.search(r"([\d.]+)/([\d.]+) CPU", status.stdout)
        if usage and float(usage.group(1)) == 0 and float(usage.group(2)) == cpus:
            if joined is not None:
                time.sleep(max(0.0, COORDINATOR_TICK_S - (time.monotonic() - joined)))
            return
        time.sleep(1)
    raise AssertionError(f"the cluster never had {cpus:g} free CPUs within {timeout:.0f} s: {usage and usage.group(0)}")


def dead_messages(cluster_env: dict) -> list[str]:
    return [n.get("state_message") or "" for n in listed_nodes(cluster_env) if n["state"] == "DEAD"]


def check_the_node(node_out: str, node_rc: int, cluster_env: dict, reason: str, late_s: int = 2) -> None:
    """The entry point drained its node for preemption, with the reason and the deadline (DEADLINE_S, less at
    most `late_s`), then left (exit 0); Ray records the node's end as a preemption, with that reason."""
    assert node_rc == 0, node_out[-3000:]
    drained = re.search(r"draining node \w+ for preemption \((.*)\): deadline in (\d+) s", node_out)
    assert drained and drained.group(1).startswith(reason), node_out[-3000:]
    assert DEADLINE_S - late_s <= int(drained.group(2)) <= DEADLINE_S, node_out[-3000:]
    assert "stopping the Ray node: " in node_out
    assert any(m.startswith(f"Terminated due to preemption: {reason}") for m in dead_messages(cluster_env))
