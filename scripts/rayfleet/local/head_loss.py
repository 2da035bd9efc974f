"""Replace a killed head on a cluster whose GCS is on a store (gcs_store.py): `rayfleet cluster replace-head`."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from rayfleet.local import gcs_store
from rayfleet.local.cluster import RAY_START_TIMED_OUT, running, start_head
from rayfleet.local.host import ClusterError, node_env
from rayfleet.local.nodes import wait_for_nodes

START_TRIES = 3  # a GCS recovering from the store can miss Ray's 30 s start-up wait (about half the time here)


def replace_head() -> float:
    """SIGKILL the running cluster's head (its whole session: GCS, raylet, dashboard) and start a new one on the
    same GCS store; returns seconds until every node is alive on it again. Only a cluster with a store."""
    state = running()
    if state is None:
        raise ClusterError("no rayfleet cluster is running; run `rayfleet cluster up --gcs-store`")
    if not state.store:
        raise ClusterError(
            "this cluster keeps its GCS in the head: a new head would know nothing (start it with --gcs-store)"
        )
    began = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(state.head_pid, signal.SIGKILL)
    state.pids.remove(state.head_pid)
    env = {**node_env(state.cluster_id, state.address), **gcs_store.nodes_env()}
    for attempt in range(START_TRIES):
        # `ray start --head` refuses while this host's last head address file names an address that live Ray
        # processes (the workers, waiting for the GCS) still point at: one host's artefact, not ECS's.
        Path(state.temp_dir, "ray_current_cluster").unlink(missing_ok=True)
        try:
            start_head(state, env, name=next_head_name(Path(state.log_dir)))
            break
        except ClusterError as exc:
            if RAY_START_TIMED_OUT not in str(exc) or attempt == START_TRIES - 1:
                raise
            print("the new head missed Ray's 30 s start-up wait; starting it again", flush=True)
    wait_for_nodes(state, 1 + state.spec["workers"])
    return time.monotonic() - began


def next_head_name(log_dir: Path) -> str:
    """head-2 for the first replacement (the first head is `head`), and so on; a head's fork server's log
    (`head-warm.log`, `head-2-warm.log`) is not a head."""
    heads = [p for p in log_dir.glob("head*.log") if not p.stem.endswith("-warm")]
    return f"head-{len(heads) + 1}"
