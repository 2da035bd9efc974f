"""The DDP loop's part of the run's goodput ledger (rayfleet/core/ledger.py): the loader's wait for each batch,
and the epoch's stepping time split into compute and the steps a fault made this attempt redo."""

from __future__ import annotations

import time

from rayfleet.core.ledger import Phases


def account_steps(phases: Phases, stepping_s: float, redone: int, seen: int, batch_size: int) -> None:
    """An epoch's stepping time (its loader waits taken out) is compute; of it, the `redone` steps a fault made
    this attempt repeat are their own phase, at the epoch's mean step time."""
    phases.add("compute", max(stepping_s, 0.0))
    steps = -(-seen // batch_size) if seen else 0
    if redone and steps:
        phases.move("compute", "redone", stepping_s / steps * redone)


def loader_waits(batches, phases: Phases | None):
    """`batches`, with the time each next batch took to be ready added to `phases`' data."""
    if phases is None:
        yield from batches
        return
    batches = iter(batches)
    while True:
        began = time.perf_counter()
        try:
            batch = next(batches)
        except StopIteration:
            return
        phases.add("data", time.perf_counter() - began)
        yield batch
