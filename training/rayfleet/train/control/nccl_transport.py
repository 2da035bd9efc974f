"""Which transport NCCL chose between a multi-node GPU run's nodes, read from NCCL's own log, recorded in the
run's record; on a worker group with EFA a run whose NCCL did not choose it stops at its start, in one line,
instead of training over TCP at a fraction of the speed (the job's `nccl_over_tcp=true` allows it).

How it is read (`worker_env`, `confirm`): the driver sets NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET and
NCCL_DEBUG_FILE for the Ray Train workers of a GPU run, unless the job's environment sets NCCL_DEBUG itself (the
user's logging then stands, and the transport is read only where NCCL_DEBUG_FILE names a file); each rank then
brings its NCCL communicator up with one all-reduce and reads the lines its own process wrote. What decides:

  * `NET/OFI Selected Provider is <name>` (the aws-ofi-nccl plugin): `efa`, or `libfabric/<name>` (e.g. tcp);
  * else `Using network <name>` (NCCL's choice of network plugin): `Libfabric`/`AWS Libfabric` -> `libfabric`,
    `IB` -> `ib`, `Socket` -> `socket` (TCP).

An EFA node is one whose environment has FI_PROVIDER=efa (the worker task definition sets it for a group with
EFA: infra/modules/ray). Only a real EFA instance shows NCCL choosing EFA; here the lines are NCCL's own,
quoted from its logs (tests/unit/train/test_nccl_transport.py).
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Iterable

EFA, SOCKET = "efa", "socket"
LOG_DIR = "/tmp/rayfleet-nccl"  # on each node: <run>.<host>.<pid>.log, one per rank process
_PROVIDER = re.compile(r"NCCL INFO NET/OFI Selected [Pp]rovider is ([\w-]+)")
_NETWORK = re.compile(r"NCCL INFO Using network (AWS Libfabric|Libfabric|IB|Socket)\b")
_NETWORKS = {"AWS Libfabric": "libfabric", "Libfabric": "libfabric", "IB": "ib", "Socket": SOCKET}


def worker_env(run_name: str, env: dict) -> dict[str, str]:
    """NCCL's logging of its network choice for the workers of a GPU run ({} where the job sets NCCL_DEBUG)."""
    if env.get("NCCL_DEBUG"):
        return {}
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": f"{LOG_DIR}/{run_name}.%h.%p.log",
    }


def chosen(lines: Iterable[str]) -> str | None:
    """The transport the lines show NCCL chose (None: they do not say)."""
    network = None
    for line in lines:
        if found := _PROVIDER.search(line):
            return EFA if found[1] == EFA else f"libfabric/{found[1]}"
        if (found := _NETWORK.search(line)) and network is None:
            network = _NETWORKS[found[1]]
    return network


def own_log(env: dict, pid: int) -> list[str]:
    """This process's NCCL log lines, from the file NCCL_DEBUG_FILE names (%h: host, %p: pid)."""
    pattern = env.get("NCCL_DEBUG_FILE") or ""
    if not pattern:
        return []
    lines: list[str] = []
    for path in glob.glob(pattern.replace("%h", "*").replace("%p", str(pid))):
        with open(path, errors="replace") as f:
            lines.extend(f)
    return lines


def problem(transport: str | None, env: dict, over_tcp_ok: bool) -> str | None:
    """Why the run must not go on (one line), or None: on an EFA node, NCCL chose another transport."""
    if env.get("FI_PROVIDER") != EFA or over_tcp_ok or transport == EFA:
        return None
    return (
        f"NCCL chose {transport or 'an unknown transport'}, not EFA, on a worker group with EFA: the run would "
        "train over TCP; check the EFA worker image (make build builds it when a group has EFA) and the node's "
        "/dev/infiniband devices, or set nccl_over_tcp=true to run anyway"
    )


def confirm(over_tcp_ok: bool, env: dict | None = None) -> str | None:
    """In a Ray Train worker of a multi-node GPU run: bring NCCL up, read what it chose (None: no log to read),
    and raise RuntimeError (one line) where `problem` says so."""
    import torch
    import torch.distributed as dist

    env = os.environ if env is None else env
    probe = torch.ones(1, device="cuda")
    dist.all_reduce(probe)  # the communicator, and with it the network, comes up at the first collective
    torch.cuda.synchronize()
    transport = chosen(own_log(env, os.getpid()))
    why = problem(transport, env, over_tcp_ok)
    if why:
        raise RuntimeError(why)
    return transport
