"""What the host gives the local cluster: the environment and PATH of its nodes and of Ray's clients, the memory
each node may advertise, and private temp directories. The cluster itself (up, down, run): cluster.py."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rayfleet.core import local_state, ray_auth

if TYPE_CHECKING:  # annotations only: cluster.py imports this module
    from rayfleet.local.cluster import ClusterState
    from rayfleet.local.spec import ClusterSpec


REPO = local_state.project_dir()  # the project the cluster starts in: its nodes import its code


GIB = 1024**3


HEAD_MEMORY_BYTES = 1 * GIB  # the head schedules and runs job drivers; it trains nothing


MIN_WORKER_MEMORY_BYTES = 512 * 1024**2


class ClusterError(RuntimeError):
    """Something the user can fix; the message says what and how."""


def venv_bin() -> Path:
    """The bin directory of this interpreter's environment (not resolved: .venv/bin/python is a symlink)."""
    return Path(sys.executable).parent


def venv_first(path: str) -> str:
    """PATH with this environment's bin first: a job's `python` and `ray` must be the ones that have Ray and
    this project's packages, also when make runs .venv/bin/python without activating the environment."""
    first = str(venv_bin())
    if path.split(os.pathsep)[0] == first:
        return path
    return os.pathsep.join(p for p in (first, path) if p)


def node_env(cluster_id: str, address: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ray_auth.auth_env())
    env.pop("RAY_AUTH_TOKEN", None)  # the file only: a token in the environment leaks into /proc
    # What Ray starts on the nodes (actors, Ray Train's helpers, a job's driver) connects to this cluster by
    # name: left to find "the" local Ray by scanning the host's processes it would see every other GCS on the
    # host (a second cluster, containers) and refuse to choose.
    env["RAY_ADDRESS"] = address
    env["RAYFLEET_CLUSTER_ID"] = cluster_id
    # Job entrypoints (`ray job submit -- python x.py`) run in the nodes' environment.
    env["PATH"] = venv_first(env.get("PATH", ""))
    # Train workers import `training` from this checkout (on ECS the image has it installed).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def client_env(state: ClusterState) -> dict[str, str]:
    """What Ray's own clients read to reach this cluster: RAY_ADDRESS (the GCS) for `ray status` and
    `ray.init()`; RAY_API_SERVER_ADDRESS (the dashboard) for `ray job ...`, `ray list ...` and
    JobSubmissionClient, which prefer it to RAY_ADDRESS; and the token file."""
    return {"RAY_ADDRESS": state.address, "RAY_API_SERVER_ADDRESS": state.dashboard_url, **ray_auth.auth_env()}


def shell_exports(state: ClusterState, environ: dict[str, str]) -> list[str]:
    """The lines `env` prints for `eval`: the client environment, and this environment's bin on PATH so
    that `ray` is the CLI of the Ray the cluster runs."""
    lines = [f"export {key}={shlex.quote(value)}" for key, value in client_env(state).items()]
    if "RAY_AUTH_TOKEN" in environ:
        lines.insert(0, "unset RAY_AUTH_TOKEN")  # Ray prefers it to the token file; it is not this cluster's
    if str(venv_bin()) not in environ.get("PATH", "").split(os.pathsep):
        lines.append(f'export PATH={shlex.quote(str(venv_bin()))}:"$PATH"')
    return lines


def available_memory() -> int:
    """Bytes of memory free now: psutil sees the host, so a cgroup (v2) limit, as in a container, caps it."""
    import psutil

    free = psutil.virtual_memory().available
    cgroup = Path("/sys/fs/cgroup")
    with contextlib.suppress(OSError, ValueError):
        limit = (cgroup / "memory.max").read_text().strip()
        if limit != "max":
            free = min(free, int(limit) - int((cgroup / "memory.current").read_text()))
    return free


def memory_shares(available: int, spec: ClusterSpec) -> tuple[int, int]:
    """Ray's `memory` resource for the head and for each worker, in bytes.

    Left to itself every node advertises all the host's free memory, so three nodes on a 24 GiB laptop
    offer 68 GiB and Ray schedules work into the OOM killer instead of making it wait. Here the nodes'
    memory plus their object stores add up to at most what is free: the head, which trains nothing, gets a
    small share, and the workers split the rest."""
    nodes = spec.workers + 1
    budget = available - nodes * spec.object_store_bytes
    head = min(HEAD_MEMORY_BYTES, budget // nodes)
    worker = (budget - head) // spec.workers
    if worker < MIN_WORKER_MEMORY_BYTES:
        raise ClusterError(
            f"only {available / GIB:.1f} GiB of memory is free: too little for {spec.workers} workers "
            f"(at least {MIN_WORKER_MEMORY_BYTES / GIB:.1f} GiB each); use fewer --workers"
        )
    return head, worker


def temp_root() -> Path:
    """Parent of the clusters' Ray temp dirs, mode 0700 (see private_dir). Short: Ray's socket paths must
    fit 107 bytes."""
    return Path(f"/tmp/rayfleet-{os.getuid()}")


def private_dir(path: Path) -> Path:
    """Create `path` with mode 0700, or make sure an existing one is the user's own, and set it to 0700.

    Ray makes its temp dir world-writable ("shared") and its logs world-readable, and does so again each
    time a node, job or driver starts; a parent of the user's only keeps other users out of the sockets and
    logs. In /tmp someone else could have made it first."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.lstat()
    if path.is_symlink() or info.st_uid != os.getuid():
        raise ClusterError(f"{path} is not a directory of yours (another user's, or a link); remove it")
    path.chmod(0o700)
    return path


def ray_cli() -> str:
    """The `ray` of this interpreter's environment: .venv/bin is not on PATH when make runs .venv/bin/python."""
    beside = venv_bin() / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")
