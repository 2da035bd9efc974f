"""One rank of the two-rank resume race (test_checkpoint_resume.py): A in a process of its own as a Ray Train
worker is, B in the test's process (one process start less). Each resumes the DDP job's state through the
job's own `ddp_state.resume` from the Checkpoint object the controller handed to every rank (the same
object, so the same uuid and Ray's same temporary folder).

The interleaving is forced with events, never with time: rank "A" pauses inside Ray's clean-up of that
temporary folder right after Ray's check that no other reader holds it (`_list_existing_del_locks`), until
rank "B" is about to read; B's read (`torch.load`, the real one, called after the pause) waits until A has
finished. Where the reader never uses Ray's shared folder, A never reaches that check and B never waits on it.
"""

from __future__ import annotations

import torch

WAIT_S = 120.0  # a deadline for the other process, never a pause


def _first(*events) -> None:
    """Wait until any of `events` is set (bounded poll), or fail."""
    import time

    deadline = time.monotonic() + WAIT_S
    while not any(e.is_set() for e in events):
        if time.monotonic() > deadline:
            raise TimeoutError("the other rank never got there")
        events[0].wait(0.05)


def rank(role: str, root: str, kept, events: dict, results) -> None:
    from ray.train import _checkpoint

    from rayfleet.train.ddp import state as ddp_state
    from tests.unit.train.ray_storage_seam import RunStorage, installed

    number = 0 if role == "A" else 1
    if role == "A":
        real_check = _checkpoint._list_existing_del_locks

        def check_then_pause(path):
            found = real_check(path)  # the time of check ...
            events["a_checked"].set()
            _first(events["b_reading"])  # ... and B downloads and starts reading before the time of use
            return found

        _checkpoint._list_existing_del_locks = check_then_pause
    else:
        _first(events["a_checked"], events["a_done"])
        real_load = torch.load

        def load_after_a(*args, **kwargs):
            events["b_reading"].set()
            _first(events["a_done"])
            return real_load(*args, **kwargs)

        torch.load = load_after_a
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    real = torch.load, _checkpoint._list_existing_del_locks  # B runs in the test's own process: put back
    try:
        with installed(RunStorage(root, rank=number, world=2, kept=kept)):
            found = ddp_state.resume(model, optimizer, "run", number)
        results.put((role, f"resumed at epoch {found.start_epoch}"))
    except Exception as exc:
        results.put((role, f"{type(exc).__name__}: {exc}"))
    finally:
        torch.load, _checkpoint._list_existing_del_locks = real
        if role == "A":
            events["a_done"].set()
