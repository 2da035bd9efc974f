"""Connect a job's driver to Ray: RAY_ADDRESS, else the running rayfleet cluster, else a cluster of its own.

A cluster the job starts itself is the same shape as `make cluster-up` and is stopped when the job ends.
Token auth is set up by training/__init__.py before Ray is imported (Ray reads it once, at import).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray

from scripts import local_cluster, ray_auth


@contextmanager
def ray_session(workers: int, cpus_per_worker: float) -> Iterator[str]:
    if os.environ.get("RAY_AUTH_TOKEN_PATH") and not os.environ.get("RAY_AUTH_TOKEN"):
        ray_auth.ensure_token(Path(os.environ["RAY_AUTH_TOKEN_PATH"]))  # set by training/__init__.py
    address = os.environ.get("RAY_ADDRESS")
    started = False
    if not address:
        state = local_cluster.running()
        if state is None:
            print("no Ray cluster running: starting a local one for this job (stopped when it ends)", flush=True)
            state = local_cluster.up(
                local_cluster.ClusterSpec.from_env(workers=workers, cpus_per_worker=cpus_per_worker)
            )
            started = True
        address = state.address
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=True)
        yield address
    finally:
        ray.shutdown()
        if started:
            local_cluster.down(quiet=True)


def placeable_workers(cpus_per_worker: float, gpus_per_worker: int) -> int:
    """How many workers of this size the alive nodes can hold at once."""
    total = 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        fit = int(res.get("CPU", 0) // cpus_per_worker + 1e-9)
        if gpus_per_worker:
            fit = min(fit, int(res.get("GPU", 0) // gpus_per_worker))
        total += fit
    return total


def cluster_gpus() -> int:
    return int(ray.cluster_resources().get("GPU", 0))


def quiet_report_logs() -> None:
    """Silence Ray Train's INFO line for every report on every rank (called on the workers).

    Ray 2.60 logs it through `logging.getLogger(__file__)`, a logger named by file path, so neither
    LoggingConfig nor the `ray.train` logger's level reaches it. The jobs print one line per epoch instead.
    """
    import logging

    try:
        from ray.train.v2._internal.execution import context
    except ImportError:  # moved in another Ray version: the lines are noise, not a failure
        return
    logging.getLogger(context.__file__).setLevel(logging.WARNING)
