"""A preemption notice for launcher recipes (torchrun, accelerate): a file and a signal any script can read.

Ray Train loops hear of a drained node from Ray itself (rayfleet/train/control/preemption.py); a torchrun script
knows nothing of Ray. So when a node of a launcher run is drained for preemption (the ECS entry point does
it on SIGTERM or the Spot two-minute notice: rayfleet/node/drain.py), the run's driver
(rayfleet/node/driver/multinode.py) tells every node's launcher actor (rayfleet/node/driver/launcher.py), and each
tells its ranks two ways:

- the file named by RAYFLEET_PREEMPT_FILE appears (written whole, by rename), holding JSON:
  {"deadline_s": seconds left when it was written, "deadline": the same as a Unix time,
   "node_rank": the node that goes, "ray_node_id": its Ray node id};
- SIGUSR1, sent only to the rank processes that catch it (a handler installed: SigCgt in /proc), since
  Python's default for SIGUSR1 is to exit. A script without a handler reads the file.

A script saves its checkpoint and exits; the driver launches the run again on the nodes that are left and
the script resumes from that checkpoint (recipes/examples/torch-ddp and hf-trainer show both).

Only the standard library and psutil: this runs in the worker image.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import psutil

FILE_VAR = "RAYFLEET_PREEMPT_FILE"
SIGNAL = signal.SIGUSR1


def write(path: str | Path, deadline: float, node_rank: int, ray_node_id: str, now: float | None = None) -> dict:
    """Write the notice whole (a reader never sees half of it); what was written."""
    now = time.time() if now is None else now
    notice = {
        "deadline_s": max(0, round(deadline - now)),
        "deadline": round(deadline, 3),
        "node_rank": node_rank,
        "ray_node_id": ray_node_id,
    }
    path = Path(path)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(notice))
    os.replace(partial, path)
    return notice


def catches(pid: int, sig: int = SIGNAL) -> bool:
    """Whether process `pid` has a handler for `sig` (bit sig-1 of SigCgt in /proc/<pid>/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    return False


def ranks_below(launcher_pid: int) -> list[int]:
    """The rank processes under a launcher: its descendants that torchrun (or accelerate) gave a RANK."""
    try:
        below = psutil.Process(launcher_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    ranks = []
    for process in below:
        with contextlib.suppress(psutil.Error):
            if "RANK" in process.environ():
                ranks.append(process.pid)
    return ranks


def signal_ranks(launcher_pid: int, sig: int = SIGNAL) -> list[int]:
    """Send `sig` to every rank under the launcher that catches it; the pids that got it."""
    sent = []
    for pid in ranks_below(launcher_pid):
        if catches(pid, sig):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
                sent.append(pid)
    return sent


NO_DEADLINE_S = 120.0  # a drain that names no deadline: Ray Train's own fallback (rayfleet/train/control/preemption.py)


def draining_nodes() -> dict[str, int]:
    """Ray's nodes being drained, as {node id: deadline in ms since the epoch, 0 for none}; {} when the GCS does
    not answer. Ray has no public call for it: this is the one Ray Train's and Serve's own preemption watchers
    read (ray/train/v2/_internal/execution/preemption.py), so an upgrade that moves it breaks them too, and
    tests/integration/test_preemption_on_local_cluster.py notices."""
    import ray._private.state

    try:
        return dict(ray._private.state.state.get_draining_nodes() or {})
    except Exception:  # a GCS hiccup: ask again at the next poll
        return {}


def first_drained(node_ids: list[str], drained: dict[str, int], now: float) -> tuple[int, str, float] | None:
    """Of a run's nodes (in node-rank order), the drained one that goes first: (node rank, Ray node id,
    deadline as a Unix time), or None when none of them is drained."""
    mine = [(rank, node) for rank, node in enumerate(node_ids) if node in drained]
    if not mine:
        return None

    def deadline(node: str) -> float:
        return drained[node] / 1000 if drained[node] else now + NO_DEADLINE_S

    rank, node = min(mine, key=lambda pair: deadline(pair[1]))
    return rank, node, deadline(node)
