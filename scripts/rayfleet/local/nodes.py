"""The local cluster's nodes: each a `ray start --block` process in its own session (the one ray start line:
rayfleet/core/ray_start.py), its ports a block above the GCS port, started and waited for until Ray sees it."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rayfleet.core import ray_start, worker_groups
from rayfleet.core.ray_start import NODE_PORTS
from rayfleet.local.host import REPO, ClusterError, ray_cli
from rayfleet.node import warm_server

if TYPE_CHECKING:  # annotations only: cluster.py imports this module
    from rayfleet.local.cluster import ClusterState
    from rayfleet.local.spec import ClusterSpec


START_TIMEOUT_S = 90


READY_MARK = "will now block forever"


def port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def head_command(spec: ClusterSpec, temp_dir: str, memory: int, gcs_store_password: str | None = None) -> list[str]:
    p = spec.port
    ports = {"gcs": p, **{name: p + 1 + i for i, name in enumerate(NODE_PORTS)}, "client": p + 7}
    return ray_start.command(
        head=True,
        block=True,
        ray=ray_cli(),
        ports={**ports, "dashboard": spec.dashboard_port},
        dashboard_host="127.0.0.1",
        resources={"num_cpus": 0, "num_gpus": 0, "memory": memory, "object_store_memory": spec.object_store_bytes},
        gcs_store_password=gcs_store_password,
        extra=[f"--temp-dir={temp_dir}"],  # like ECS: the head schedules, it never trains (no CPUs, no GPUs)
    )


def worker_command(
    spec: ClusterSpec, index: int, memory: int, custom: dict | None = None, temp_dir: str | None = None
) -> list[str]:
    """A worker node's `ray start`. `temp_dir`: a temp dir of its own (a cluster whose head can be replaced, so
    drivers can attach to this node by it: gcs_store.worker_temp_dir); else the head's."""
    b = spec.port + 10 * (index + 1)
    group, gpus = spec.node_groups()[index]
    resources = {"num_cpus": f"{spec.cpus_per_worker:g}", "num_gpus": gpus, "memory": memory}
    return ray_start.command(
        address=f"127.0.0.1:{spec.port}",
        block=True,
        ray=ray_cli(),
        ports={name: b + i for i, name in enumerate(NODE_PORTS)},
        resources={**resources, "object_store_memory": spec.object_store_bytes},
        custom_resources=custom,
        labels=worker_groups.node_labels(group),  # its group, as Ray places work on it (logical GPUs: no CUDA)
        # One host, one session log dir (a worker's own temp dir links its logs to it): the head's log monitor
        # already forwards every worker's output to the driver; a monitor per node would print each line once
        # per node. (On ECS each node has its own.)
        extra=["--include-log-monitor=false", *([f"--temp-dir={temp_dir}"] if temp_dir else [])],
    )


def start_node(name: str, cmd: list[str], env: dict, log_dir: Path, warm_dir: Path | None = None) -> int:
    """Start a node's `ray start --block` and wait until it says it is ready. With `warm_dir`, first its fork
    server for warm worker processes (rayfleet/node/warm_server.py), in the same environment, whose socket
    the node's environment names; it preloads while Ray starts, and workers start fresh until it is ready."""
    if warm_dir is not None:
        with open(log_dir / f"{name}-warm.log", "w") as log:
            _, env = warm_server.spawn(warm_dir / f"{name}.sock", env, log=log, cwd=REPO)
    log_path = log_dir / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=REPO,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if READY_MARK in text:
            return proc.pid
        if proc.poll() is not None:
            with contextlib.suppress(ProcessLookupError):  # what it started (a GCS server, a raylet) goes too
                os.killpg(proc.pid, signal.SIGKILL)
            raise ClusterError(f"{name} exited with code {proc.returncode}; log {log_path}:\n{tail_of(text)}")
        time.sleep(0.5)
    raise ClusterError(f"{name} did not start within {START_TIMEOUT_S}s; log {log_path}:\n{tail_of(text)}")


def wait_for_nodes(state: ClusterState, count: int) -> None:
    """Wait until the head reports `count` alive nodes: `ray start` says it is ready before that."""
    from ray.util.state import list_nodes  # imported late: after ray_auth.use_token_auth() (in up)

    deadline = time.monotonic() + START_TIMEOUT_S
    alive = 0
    while time.monotonic() < deadline:
        try:
            # Ray 2.60 counts a replaced head's dead node against the filtered answer and calls it truncated
            found = list_nodes(
                address=state.dashboard_url, filters=[("state", "=", "ALIVE")], raise_on_missing_output=False
            )
            alive = len(found)
        except Exception:  # the dashboard answers a few seconds after the head's GCS
            alive = 0
        if alive >= count:
            return
        time.sleep(0.5)
    raise ClusterError(
        f"only {alive} of {count} Ray nodes registered within {START_TIMEOUT_S}s; logs in {state.log_dir}"
    )


def wait_for_warm_servers(warm_dir: Path, names: list[str], timeout_s: float = START_TIMEOUT_S) -> list[str]:
    """Wait until each node's fork server listens (its socket exists); return the names of those that did
    not within the timeout (their workers start as fresh processes; the log says why)."""
    deadline = time.monotonic() + timeout_s
    missing = list(names)
    while missing and time.monotonic() < deadline:
        missing = [name for name in missing if not (warm_dir / f"{name}.sock").exists()]
        if missing:
            time.sleep(0.5)
    return missing


def tail_of(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])
