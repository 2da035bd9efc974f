"""What a training loop decides around its steps, in one place for the DDP and the FSDP job: the preemption
check, the budget's stop request (rayfleet/core/stop_request.py), when to save a checkpoint, and the one checkpoint
that a notice or a stop asks for.

Every rank calls it at the same points (the checks are collectives):

    control.steps.enter() ... control.steps.leave()    around every step: the hang watchdog's view (hang_watch.py)
    preempted = control.noticed(step)                  after every step: asks Ray every N steps (preemption.py)
    decision = control.at_boundary(done, save, where)  where the loop may checkpoint (an epoch's end, a logged
    if decision.stop_reason:                           step): saves when the cadence or a stop request asks
        break
    if preempted:
        control.save_at_notice(save_noticed, where, reached)   saves once, then waits for the restart

One checkpoint per point: a notice takes the place of the cadence's checkpoint at its step (two saves into
one directory were two reports of it, and Ray's pruning of the first one failed the run on the second); a
stop request saves the boundary's regular checkpoint, due or not, and the loop ends without the notice's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from rayfleet.train.control.hang_watch import Steps
from rayfleet.train.control.preemption import Preemption, record_reached


def agreed(run_dir: RunDir, rank: int, device: torch.device) -> str | None:
    """A collective: every rank calls it at the same point. The reason on every rank when rank 0 saw a stop
    request (rayfleet/core/stop_request.py)."""
    import torch.distributed as dist

    reason = stop_request.requested(run_dir) if rank == 0 else None
    flag = torch.tensor([1.0 if reason else 0.0], device=device)
    dist.all_reduce(flag)
    if flag.item() == 0:
        return None
    return reason or "rank 0 was asked to stop"


@dataclass(frozen=True)
class Decision:
    """What happened at a boundary: `save`, the regular checkpoint was saved there; `stop_reason`, every rank
    agreed to stop there (a budget), with that checkpoint saved: the loop ends."""

    save: bool
    stop_reason: str | None = None


class RunControl:
    """The per-step and per-boundary control of one worker's loop.

    `checkpoint_every` and `last` are in the loop's unit at its boundaries (DDP: epochs, FSDP: steps): a
    checkpoint is due every `checkpoint_every` and at `last`. `stop_after_save` asks about a stop request after
    the boundary's due checkpoint rather than before it (DDP: after each epoch's checkpoint, so a request that
    comes while it is written stops the run there; FSDP: before the step's). Either way a stop saves once."""

    def __init__(
        self,
        run_dir: RunDir,
        rank: int,
        device: torch.device,
        preemption: Preemption,
        checkpoint_every: int = 1,
        last: int | None = None,
        stop_after_save: bool = False,
        steps: Steps | None = None,
    ):
        self.run_dir, self.rank, self.device, self.preemption = run_dir, rank, device, preemption
        self.steps = steps or Steps(rank)  # reported to the run's hang watchdog when started with it
        self.checkpoint_every, self.last, self.stop_after_save = checkpoint_every, last, stop_after_save
        self.notice_pending = False  # a notice seen and its checkpoint not yet saved

    def noticed(self, step: int) -> bool:
        """The preemption check, on every rank after every step (a collective every N steps): True once."""
        if self.preemption.noticed(step):
            self.notice_pending = True
            return True
        return False

    def checkpoint_due(self, done: int) -> bool:
        return done % self.checkpoint_every == 0 or done == self.last

    def at_boundary(self, done: int, save: Callable[[], None], where: str) -> Decision:
        """At a point every rank reaches together: asks whether to stop (a collective, every rank) and calls
        `save` (every rank) when the cadence asks for a checkpoint and no notice will take its place, or when
        every rank agreed to stop. On a stop rank 0 says so (`where`: "at step 7", "after epoch 2")."""
        saved = self.checkpoint_due(done) and not self.notice_pending
        reason = None if self.stop_after_save else agreed(self.run_dir, self.rank, self.device)
        saved = saved or bool(reason)
        if saved:
            save()
        if self.stop_after_save:
            reason = agreed(self.run_dir, self.rank, self.device)
            if reason and not saved:
                save()
                saved = True
        if reason:
            self.notice_pending = False  # the run stops here, checkpointed: no second save for the notice
            if self.rank == 0:
                print(f"stopping {where} (its checkpoint is saved): {reason}", flush=True)
        return Decision(saved, reason)

    def save_at_notice(self, save: Callable[[], None], where: str, reached: int) -> None:
        """After the step a notice came at (every rank): `save` its checkpoint, once; rank 0 records how far
        the run got (`reached`, in record_reached's unit) and says so; then waits for Ray Train's restart,
        which ends this worker (preemption.py). Does nothing without a pending notice."""
        if not self.notice_pending:
            return
        self.notice_pending = False
        save()
        if self.rank == 0:
            record_reached(self.run_dir, reached)
            print(
                f"{self.preemption.describe()}: checkpoint saved at {where}; waiting for Ray Train to restart "
                "the run from it",
                flush=True,
            )
        self.preemption.wait_for_restart()
