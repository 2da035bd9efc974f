"""The DDP job's checkpointed state: what a run resumes from (the latest checkpoint, its epoch and position),
what each epoch saves, and the mid-epoch save at a preemption notice (through rayfleet/train/control/run_control.py)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rayfleet.core.run_dir import RunDir
from rayfleet.train import checkpoint
from rayfleet.train.control.preemption import redone_since
from rayfleet.train.ddp.config import DDPConfig
from rayfleet.train.ddp.reduce import all_sum


@dataclass(frozen=True)
class EpochPosition:
    """How far into an epoch a preemption checkpoint was taken: the samples used (all ranks together: the
    permutation's prefix, rayfleet/train/data/order.py), and the epoch's train loss so far."""

    epoch: int
    samples: int
    loss_sum: float = 0.0
    seen: int = 0


@dataclass(frozen=True)
class Resume:
    """Where a (re)started attempt begins, from the latest checkpoint; what the run carries across restarts."""

    start_epoch: int = 1
    attempt: int = 0
    position: EpochPosition | None = None  # set when the checkpoint was taken mid-epoch, at a preemption
    preemptions: int = 0
    steps_redone: int = 0
    resumed_from: str | None = None  # the checkpoint's name: the newest complete one kept (checkpoint.latest)


def resume(model, optimizer, run_name: str, rank: int) -> Resume:
    with checkpoint.latest(required=[checkpoint.STATE_FILE]) as directory:
        state = checkpoint.read_state(directory) if directory else None
        resumed_from = directory.name if directory else None
    if state is None:
        return Resume()
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    checkpoint.set_rng_state(state["rng"])
    position = EpochPosition(**state["position"]) if state.get("position") else None
    carried = state.get("preemptions", 0), state.get("steps_redone", 0)
    found = Resume(state["epoch"] + 1, state["attempt"] + 1, position, *carried, resumed_from)
    if rank == 0:
        where = (
            f"epoch {state['epoch']}"
            if position is None
            else f"{position.samples:,} samples into epoch {position.epoch}"
        )
        print(f"resuming {run_name} from the checkpoint of {where} (attempt {found.attempt})", flush=True)
    return found


def redone_steps(run_dir: RunDir, found: Resume, n: int, per_step: int) -> int:
    """Steps the previous attempt took past the checkpoint this one resumes from (rank 0; see preemption.py)."""
    if found.attempt == 0:
        return 0
    resumed = (found.start_epoch - 1) * n + (found.position.samples if found.position else 0)
    return -(-redone_since(run_dir, resumed) // per_step)


def save_epoch(
    model, optimizer, cfg: DDPConfig, found: Resume, carried: dict, row: dict, rank: int, uploads: checkpoint.Uploads
) -> None:
    """An epoch's checkpoint with its metrics row; every rank calls it, rank 0 saves the whole model. With
    async_checkpoint the loop waits only while rank 0 copies the state into CPU memory (and, first, for the
    previous checkpoint if it is still being uploaded: one in flight); Ray Train's upload thread writes and
    uploads it (checkpoint.Uploads). Without, both happen here."""
    if cfg.async_checkpoint:
        uploads.wait()
    state = train_state(model, optimizer, cfg, found, carried, row["epoch"]) if rank == 0 else None
    name = checkpoint.checkpoint_name(row["epoch"])
    if cfg.async_checkpoint:
        state = checkpoint.staged(state)
    write = (lambda directory: checkpoint.write_state(directory, state)) if rank == 0 else None
    (uploads.report if cfg.async_checkpoint else checkpoint.report)(row, name, write, writers=1)  # rank 0 alone


def train_state(model, optimizer, cfg: DDPConfig, found: Resume, carried: dict, epoch: int) -> dict:
    """What a checkpoint holds: `epoch` is the last complete one."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "attempt": found.attempt,
        "seed": cfg.seed,
        "rng": checkpoint.rng_state(),
        **carried,
    }


def position_at(epoch: int, position: EpochPosition | None, loss_sum, seen: int, world: int, device) -> EpochPosition:
    """Where this epoch stands on every rank (a collective), counting the part before an earlier resume."""
    before = position or EpochPosition(epoch, 0)
    loss, samples = all_sum(loss_sum, seen, device=device)
    return EpochPosition(epoch, before.samples + seen * world, before.loss_sum + loss, before.seen + int(samples))


def save_at_preemption(model, optimizer, cfg, found: Resume, carried: dict, mid: EpochPosition, rank: int, step: int):
    """The checkpoint a preemption notice asks for, mid-epoch, through the usual path; every rank calls it."""
    state = train_state(model, optimizer, cfg, found, carried, mid.epoch - 1)
    state.update(position=asdict(mid), preemptions=carried["preemptions"] + 1)
    write = (lambda directory: checkpoint.write_state(directory, state)) if rank == 0 else None
    name = f"{checkpoint.checkpoint_name(mid.epoch - 1)}_step_{step:06d}"  # sorts between its epochs' names
    checkpoint.report({"epoch": mid.epoch, "step": step, "preempted": True}, name, write, writers=1)
