"""What a run holds to serve, found from its run directory (local or s3://), before anything is deployed."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from rayfleet.core.checkpoint_seal import Verdict, check_filesystem
from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir

EXPORT = "export"  # the FSDP/DeepSpeed job's verified Hugging Face folder (rayfleet/train/checkpoint/hf_export.py)
DDP_CHECKPOINT = re.compile(r"^checkpoint_\d{6}$")  # rayfleet.train.checkpoint.checkpoint_name
DDP_STATE = "state.pt"  # rayfleet.train.checkpoint.STATE_FILE: what a DDP checkpoint cannot be without


class NothingToServe(ConfigError):
    """Refused before anything is deployed (exit 2)."""

    pass


@dataclass(frozen=True)
class ServedRun:
    kind: Literal["llm", "classifier"]
    folder: str  # in the run directory: "export" or the DDP job's latest complete checkpoint_NNNNNN
    skipped: tuple[str, ...] = ()  # newer checkpoints passed over: "<name> is incomplete (<why>)"


def find(run_dir: RunDir) -> ServedRun:
    entries = run_dir.entries()
    if not entries:
        raise NothingToServe(f"no run at {run_dir.display()} (rayfleet runs lists them)")
    if EXPORT in entries:
        return ServedRun("llm", EXPORT)
    checkpoints = sorted(name for name in entries if DDP_CHECKPOINT.match(name))
    if checkpoints:
        return _latest_complete(run_dir, checkpoints)
    if any(name.startswith("checkpoint_step_") for name in entries):
        raise NothingToServe(
            f"run {run_dir.run_name} has checkpoints but no {EXPORT}/: its job writes the export when it "
            "finishes; let it finish (or resume it) first"
        )
    raise NothingToServe(
        f"run {run_dir.run_name} has nothing to serve: no {EXPORT}/ (FSDP job) and no checkpoint_NNNNNN/ (DDP job)"
    )


def verdict(run_dir: RunDir, name: str) -> Verdict:
    """Whether the DDP checkpoint `name` of the run is complete (rayfleet/core/checkpoint_seal.py), read where
    it lies: the run's storage, local or S3, without copying it."""
    root, filesystem = run_dir.ray_storage()
    base = f"{root.rstrip('/')}/{run_dir.run_name}/{name}"
    return check_filesystem(filesystem, base if run_dir.is_s3 else os.path.abspath(base), [DDP_STATE])


def _latest_complete(run_dir: RunDir, checkpoints: list[str]) -> ServedRun:
    """The newest complete checkpoint: one still being written, or whose files are gone, is passed over."""
    skipped = []
    for name in reversed(checkpoints):
        found = verdict(run_dir, name)
        if found.complete:
            return ServedRun("classifier", name, tuple(skipped))
        skipped.append(f"{name} is incomplete ({found.why})")
    raise NothingToServe(f"run {run_dir.run_name} has no complete checkpoint to serve: {'; '.join(skipped)}")
