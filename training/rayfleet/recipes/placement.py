"""What Ray has placed, for the run queue's admission (rayfleet/recipes/admission.py): the probe that asks for
a run's whole placement group at once, and the placement groups Ray knows, through its state API."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from rayfleet.core import worker_groups
from rayfleet.core.run_queue import Entry

PROBE_S = 2.0  # how long one try waits for Ray to place the whole group
RECONNECT_VAR = "RAY_gcs_rpc_server_reconnect_timeout_s"  # how long this node's Ray waits for a replaced head
RAY_RECONNECT_DEFAULT_S = 60.0  # Ray 2.60's default for it


def probe(entry: Entry, timeout_s: float = PROBE_S) -> bool:
    """Can Ray place every worker of the run now? Asks for the whole placement group (PACK, or one per node
    for launcher runs, as the jobs themselves do) and removes it again, placed or not."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = {"CPU": entry.cpus_per_worker, **({"GPU": entry.gpus_per_worker} if entry.gpus_per_worker else {})}
    strategy = "STRICT_SPREAD" if entry.one_per_node else "PACK"
    group = placement_group(
        [dict(bundle) for _ in range(entry.workers)],
        strategy=strategy,
        **worker_groups.bundle_selectors(entry.group or None, entry.workers),  # the run's group, as the run will be
    )
    try:
        ready, _ = ray.wait([group.ready()], timeout=timeout_s)
        return bool(ready)
    finally:
        remove_placement_group(group)


def groups() -> dict[str, str]:
    """Every placement group Ray knows and its state."""
    from ray.util.state import list_placement_groups

    return {g.placement_group_id: g.state for g in list_placement_groups(limit=10000)}


def groups_once_reachable(
    say: Callable[[str], None] = print,
    wait_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep=time.sleep,
) -> dict[str, str]:
    """groups(), waiting out a head being replaced: the state API is its dashboard's, away until the new head
    is up (with a GCS store the run's job lives on, and must not fail for it: issue 31). By default as long as
    this node waits for the head: its RAY_gcs_rpc_server_reconnect_timeout_s (set with a GCS store by
    rayfleet/local/gcs_store.py and infra/modules/ray), else Ray's own 60 s."""
    from ray.util.state.exception import ServerUnavailable

    if wait_s is None:
        wait_s = float(os.environ.get(RECONNECT_VAR, RAY_RECONNECT_DEFAULT_S))
    deadline, said = clock() + wait_s, False
    while True:
        try:
            return groups()
        except ServerUnavailable:
            if clock() >= deadline:
                raise
            if not said:
                say(f"queue: Ray's state API does not answer (the head away?); waiting up to {wait_s:.0f} s")
                said = True
            sleep(2.0)


def placed_after(known: set[str]) -> Callable[[], bool]:
    """Has Ray created a placement group that did not exist at admission (`known`)? The queue admits one run at
    a time, so a new one is the admitted run's (Ray Train's workers, the launchers). Ray gives the group of a
    driver that the job started no link to the job that the queue knows, hence this test."""

    def test() -> bool:
        return any(state == "CREATED" and gid not in known for gid, state in groups().items())

    return test
