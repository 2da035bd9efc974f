"""Connect a job's driver to Ray: RAY_ADDRESS, else the rayfleet local cluster this checkout started.

The library never starts a cluster itself: on a laptop, `rayfleet cluster run -- CMD` (what
`make demo` and `make train-ddp ON=local` use) starts one for the command when none runs, and stops it after.
The entry point calls `use_token_auth()` before Ray is imported (Ray reads its auth mode once, at import).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import ray

from rayfleet.core import local_state, ray_auth, ray_start, warm_workers, worker_groups
from rayfleet.core.errors import RayfleetError


class NoCluster(RayfleetError):
    pass


def cluster_address() -> str:
    """RAY_ADDRESS, else the address the local cluster recorded (rayfleet/core/local_state.py)."""
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    state = local_state.cluster_state_file()
    if state.is_file():
        return json.loads(state.read_text())["address"]
    raise NoCluster(
        "no Ray cluster: start one with `rayfleet cluster up` (or run the job through "
        "`rayfleet cluster run -- ...`), or set RAY_ADDRESS"
    )


@contextmanager
def ray_session() -> Iterator[str]:
    if os.environ.get("RAY_AUTH_TOKEN_PATH") and not os.environ.get("RAY_AUTH_TOKEN"):
        ray_auth.ensure_token(Path(os.environ["RAY_AUTH_TOKEN_PATH"]))  # set by the entry point's use_token_auth
    address = cluster_address()
    if not (os.environ.get("RAY_AUTH_MODE") or os.environ.get("RAY_AUTH_TOKEN")):
        raise NoCluster(
            "Ray token auth is not set up in this shell: run the job through `rayfleet cluster run`, or first "
            'eval "$(.venv/bin/rayfleet cluster env)"'
        )
    # A job's worker processes fork from the nodes' warm servers (rayfleet/core/warm_workers.py); a driver
    # that the Jobs API started has its job's runtime_env, which says so itself (rayfleet/recipes/job.py).
    runtime_env = None if ray_start.JOB_CONFIG_VAR in os.environ else warm_workers.runtime_env()
    try:
        ray.init(
            address=address,
            logging_level="WARNING",
            log_to_driver=True,
            runtime_env=runtime_env,
            **ray_start.driver_init_kwargs(os.environ),
        )
        yield address
    finally:
        ray.shutdown()


def group_nodes(group: str | None, nodes: list[dict] | None = None) -> list[dict]:
    """The alive nodes of a worker group (rayfleet/core/worker_groups.py), or every alive node (None)."""
    found = ray.nodes() if nodes is None else nodes
    return [
        n
        for n in found
        if n.get("Alive") and (group is None or (n.get("Labels") or {}).get(worker_groups.GROUP_LABEL) == group)
    ]


def placeable_workers(cpus_per_worker: float, gpus_per_worker: int, group: str | None = None) -> int:
    """How many workers of this size the alive nodes (of `group`) can hold at once."""
    total = 0
    for node in group_nodes(group):
        res = node.get("Resources", {})
        fit = int(res.get("CPU", 0) // cpus_per_worker + 1e-9)
        if gpus_per_worker:
            fit = min(fit, int(res.get("GPU", 0) // gpus_per_worker))
        total += fit
    return total


def cluster_gpus(group: str | None = None) -> int:
    """The GPUs of the alive nodes (of `group`): a run on a group uses GPUs when that group has them."""
    return int(sum(n.get("Resources", {}).get("GPU", 0) for n in group_nodes(group)))


def quiet_report_logs() -> None:
    """Silence Ray Train's INFO line for every report on every rank (called on the workers).

    Ray 2.60 logs it through `logging.getLogger(__file__)`, a logger named by file path, so neither
    LoggingConfig nor the `ray.train` logger's level reaches it. The jobs print one line per epoch instead.
    """
    import logging

    try:
        from ray.train.v2._internal.execution import context  # noqa: PLC2701 (the logger is named by this file)
    except ImportError:  # moved in another Ray version: the lines are noise, not a failure
        return
    logging.getLogger(context.__file__).setLevel(logging.WARNING)
