"""What Ray has placed, for the run queue's admission (rayfleet/recipes/admission.py): the probe that asks for
a run's whole placement group at once, and the placement groups Ray knows, through its state API."""

from __future__ import annotations

from collections.abc import Callable

from rayfleet.core import worker_groups
from rayfleet.core.run_queue import Entry

PROBE_S = 2.0  # how long one try waits for Ray to place the whole group


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


def groups() -> dict[str, tuple[str, float]]:
    """Every placement group Ray knows: its state, and when the GCS received the request that created it (seconds
    since the epoch, the head's clock)."""
    from ray.util.state import list_placement_groups

    listed = list_placement_groups(limit=10000, detail=True)  # `stats` is a detail
    return {
        g.placement_group_id: (g.state, int((g.stats or {}).get("creation_request_received_ns") or 0) / 1e9)
        for g in listed
    }


def placed_since(admitted_at: float, listed: Callable[[], dict[str, tuple[str, float]]] | None = None):
    """Has Ray created a placement group asked for since the admission (`admitted_at`, this node's clock; the head's
    is the same locally and NTP-synced on ECS)? The queue admits one run at a time, so such a group is the admitted
    run's (Ray Train's workers, the launchers); the admission's own probe was asked for earlier and is removed.
    Ray gives the group of a driver that the job started no link to the job that the queue knows, hence this test.
    Nothing is asked at admission: a head being replaced then (issue 31) is waited out by the heartbeat, which
    asks again at its next beat."""

    def test() -> bool:
        found = (listed or groups)()
        return any(state == "CREATED" and asked >= admitted_at for state, asked in found.values())

    return test
