"""What a node of the images offers and how it starts: its pinned ports (infra/catalog/ray_ports.json), its
resources capped by the task's cgroup and /dev/shm, and its `ray start` line (rayfleet/core/ray_start.py)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from rayfleet.core import ray_start, worker_groups
from rayfleet.core.ray_start import NODE_PORTS

DEFAULT_PORTS = {"gcs": {"from": 6379, "to": 6379}, "dashboard": {"from": 8265, "to": 8265}}


MIB = 1024 * 1024


def ports(env: dict) -> dict[str, dict]:
    return json.loads(env["RAYFLEET_RAY_PORTS"]) if env.get("RAYFLEET_RAY_PORTS") else DEFAULT_PORTS


# The GCS store's token (infra/modules/ray: the head's `secrets`), beside RAY_REDIS_ADDRESS in its environment.
GCS_STORE_PASSWORD_ENV = "RAYFLEET_GCS_STORE_PASSWORD"
# Every node's, with a GCS store: a replaced head takes the cluster back, so a node keeps its raylet (Ray
# reconnects to the head's name, resolved again) instead of leaving to rejoin (infra/modules/ray).
GCS_STORE_ENV = "RAYFLEET_GCS_STORE"
HEAD_PORTS = ("gcs", "dashboard", "client", *NODE_PORTS)


def pinned(spec: dict[str, dict], names: tuple[str, ...]) -> dict:
    """ray_start.command's ports and worker range, for every fixed port the security group opens."""
    ports = {name: spec[name]["from"] for name in names if name in spec}
    workers = (spec["workers"]["from"], spec["workers"]["to"]) if "workers" in spec else None
    return {"ports": ports, "worker_ports": workers}


def cgroup_cpus(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the container may use: cgroup v2 cpu.max, or v1's quota/period; None when unlimited."""
    v2 = root / "cpu.max"
    if v2.exists():
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    quota_file, period_file = root / "cpu" / "cpu.cfs_quota_us", root / "cpu" / "cpu.cfs_period_us"
    if quota_file.exists() and int(quota_file.read_text()) > 0:
        return int(quota_file.read_text()) / int(period_file.read_text())
    return None


def cgroup_memory(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes the container may use: cgroup v2 memory.max or v1's limit; None when unlimited."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        if path.exists():
            text = path.read_text().strip()
            if text == "max" or int(text) >= 2**60:  # v1 reports "unlimited" as a huge number
                return None
            return int(text)
    return None


def shm_bytes(path: str = "/dev/shm") -> int:
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize


def resources(env: dict, cgroup: Path = Path("/sys/fs/cgroup"), shm: str = "/dev/shm") -> dict[str, int]:
    """CPUs, GPUs, memory and object store for `ray start`: what was asked for, capped by what the task has."""
    cpus = int(env.get("RAYFLEET_NUM_CPUS") or os.cpu_count() or 1)
    limit = cgroup_cpus(cgroup)
    if limit is not None:
        cpus = min(cpus, max(1, int(limit)))
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
    listed = visible not in ("", "void", "none", "all")
    visible_gpus = len([d for d in visible.split(",") if d.strip()]) if listed else 0
    gpus = int(env.get("RAYFLEET_NUM_GPUS") or visible_gpus)
    shm_size = shm_bytes(shm)
    store = int(env.get("RAYFLEET_OBJECT_STORE_MIB") or 0) * MIB or int(shm_size * 0.8)
    store = min(store, shm_size - 64 * MIB)  # the store lives in /dev/shm: never ask for more than it holds
    memory = cgroup_memory(cgroup)
    if memory is not None:  # shm pages count against the limit: leave the processes at least half of it
        store = min(store, memory // 2)
    result = {"num_cpus": cpus, "num_gpus": gpus, "object_store_memory": max(store, 78 * MIB)}
    if memory is not None:
        # Ray's memory resource: what remains of the task's limit after the store (shm counts against it).
        result["memory"] = max(memory - result["object_store_memory"] - 512 * MIB, 256 * MIB)
    return result


def head_command(env: dict) -> list[str]:
    spec = ports(env)
    res = resources(env)
    res.update(num_cpus=int(env.get("RAYFLEET_NUM_CPUS") or 0), num_gpus=0)  # the head schedules, never trains
    # the dashboard listens on the task's address: only the cluster's own security group reaches it
    return ray_start.command(
        head=True,
        block=True,
        dashboard_host="0.0.0.0",
        resources=res,
        gcs_store_password=env.get(GCS_STORE_PASSWORD_ENV) or None,  # from the task's secrets, with RAY_REDIS_ADDRESS
        **pinned(spec, HEAD_PORTS),
    )


def join_command(env: dict, head: str, block: bool, driver_only: bool = False) -> list[str]:
    """`ray start` joining the head at `head` (its Cloud Map name for a worker, so each start resolves it)."""
    spec = ports(env)
    res = resources(env)
    custom = None
    if driver_only:  # the trainer joins so its driver has a local raylet; it offers nothing to schedule on
        res.update(num_cpus=0, num_gpus=0)
        custom = {trainer_resource(env): 1}  # except a recipe's entrypoint
    address = f"{head}:{spec['gcs']['from']}"
    group = None if driver_only else worker_groups.from_env(env)  # a worker node's group, as its task says
    return ray_start.command(
        address=address,
        block=block,
        resources=res,
        custom_resources=custom,
        labels=worker_groups.node_labels(group) if group else None,
        **pinned(spec, NODE_PORTS),
    )


def trainer_resource(env: dict) -> str:
    """A Ray resource only this trainer task's node has: a recipe's Jobs API entrypoint asks for it."""
    return f"rayfleet_trainer_{env.get('HOSTNAME') or socket.gethostname()}"
