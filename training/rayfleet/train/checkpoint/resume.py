"""What a (re)started attempt resumes from: the newest COMPLETE checkpoint Ray Train kept, read from a private
copy of this rank's own (rayfleet.train.checkpoint re-exports `latest` for every reader: DDP, FSDP, DeepSpeed).

Why a private copy: `Checkpoint.as_directory()` downloads a checkpoint in S3 into `/tmp/checkpoint_tmp_<uuid>`,
and the controller hands every worker the same Checkpoint object (one uuid), so the ranks of one node share
that folder; a rank leaving its block deletes it when Ray finds no other reader's lock file, and Ray's look
and its delete are not one step: a rank starting to read in between read a vanished folder
(`FileNotFoundError: /tmp/checkpoint_tmp_<hex>/state.pt`, issue 48). `to_directory(<a folder of this rank's>)`
shares nothing and is removed when the block ends.

Why a check: a registered checkpoint can still be incomplete when read (its objects deleted under it, a
rank's files missing). Each candidate copy is judged by its seals (rayfleet/core/checkpoint_seal.py), the
ranks agree (one all-reduce: every rank resumes from the same checkpoint or none does), and an incomplete
one is skipped for the one before it with ONE line (rank 0). None complete: NoCompleteCheckpoint, one line;
never a silent start from scratch, which would lose the run's progress.

Why the one before it is still there: the candidates are the checkpoints Ray Train's snapshot keeps
(`get_all_reported_checkpoints`: CheckpointConfig.num_to_keep, newest last; ray/train/v2/_internal/execution/
checkpoint/checkpoint_manager.py). Ray deletes a checkpoint only when a newer one is registered and it falls
out of the last `num_to_keep`, never the latest, and it registers a checkpoint only after every rank's files
are uploaded, each rank's seal among them (the seal is written before the report). So a fallback target F is
deleted only after `num_to_keep` newer checkpoints were registered, each sealed complete when registered:
retention never leaves the run without a complete checkpoint it once had, as long as num_to_keep >= 2 (with
1, the latest is the only one kept and there is nothing to fall back to).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import ray.train
import torch
import torch.distributed as dist

from rayfleet.core.checkpoint_seal import Verdict, check_directory
from rayfleet.core.errors import RayfleetError


class NoCompleteCheckpoint(RayfleetError):
    """Every checkpoint a run kept is incomplete: the attempt stops rather than start over."""


def _name(checkpoint) -> str:
    return Path(checkpoint.path).name


def candidates() -> list:
    """The checkpoints Ray Train kept for this run, newest first ([] on a fresh start)."""
    latest = ray.train.get_checkpoint()
    if latest is None:
        return []
    mode = ray.train.CheckpointConsistencyMode.COMMITTED  # registered; no validation to wait for
    kept = [r.checkpoint for r in ray.train.get_all_reported_checkpoints(consistency_mode=mode, timeout_s=60)]
    ordered = [latest] + [c for c in reversed(kept) if c.path != latest.path]
    return ordered


def _agreed(complete: bool) -> bool:
    """True only if the copy is complete on every rank (one all-reduce where there is a process group)."""
    if not (dist.is_available() and dist.is_initialized()):
        return complete
    device = torch.device("cpu")
    if dist.get_backend() == "nccl":
        import ray.train.torch

        device = ray.train.torch.get_device()
    flag = torch.tensor([1.0 if complete else 0.0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item() == 1.0)


def _copy(checkpoint, target: Path, required: Iterable[str]) -> Verdict:
    try:
        checkpoint.to_directory(str(target))
    except OSError as exc:  # gone from storage altogether
        return Verdict(False, f"it could not be copied ({type(exc).__name__}: {exc})")
    return check_directory(target, required)


@contextmanager
def latest(required: Iterable[str] = ()) -> Iterator[Path | None]:
    """The newest complete checkpoint as a private local directory named like it while the block runs (its
    `.name` is the checkpoint's), or None on a fresh start. `required`: the files this reader cannot do
    without, which an unsealed (older) checkpoint must hold."""
    kept = candidates()
    if not kept:
        yield None
        return
    required = tuple(required)
    say = ray.train.get_context().get_world_rank() == 0
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rayfleet-resume-") as private:
        for checkpoint in kept:
            local = Path(private) / _name(checkpoint)
            verdict = _copy(checkpoint, local, required)
            if _agreed(verdict.complete):
                if say and skipped:
                    print(f"rayfleet: {'; '.join(skipped)}: resuming from {local.name} instead", flush=True)
                elif say and verdict.legacy:
                    print(f"rayfleet: {local.name}: {verdict.why}; read as is", flush=True)
                yield local
                return
            why = verdict.why if not verdict.complete else "another rank found its copy incomplete"
            skipped.append(f"{local.name} is incomplete ({why})")
            shutil.rmtree(local, ignore_errors=True)
    raise NoCompleteCheckpoint(
        f"no complete checkpoint to resume from: {'; '.join(skipped)}; not starting over, which would lose the "
        "run's progress (resubmit under a new run name to start from scratch)"
    )
