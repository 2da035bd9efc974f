"""What a run holds to serve, found from its run directory (local or s3://), before anything is deployed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir

EXPORT = "export"  # the FSDP/DeepSpeed job's verified Hugging Face folder (rayfleet/train/hf_export.py)
DDP_CHECKPOINT = re.compile(r"^checkpoint_\d{6}$")  # rayfleet.train.checkpoint.checkpoint_name


class NothingToServe(ConfigError):
    """Refused before anything is deployed (exit 2)."""

    pass


@dataclass(frozen=True)
class ServedRun:
    kind: Literal["llm", "classifier"]
    folder: str  # in the run directory: "export" or the DDP job's latest checkpoint_NNNNNN


def find(run_dir: RunDir) -> ServedRun:
    entries = run_dir.entries()
    if not entries:
        raise NothingToServe(f"no run at {run_dir.display()} (make runs lists them)")
    if EXPORT in entries:
        return ServedRun("llm", EXPORT)
    checkpoints = sorted(name for name in entries if DDP_CHECKPOINT.match(name))
    if checkpoints:
        return ServedRun("classifier", checkpoints[-1])
    if any(name.startswith("checkpoint_step_") for name in entries):
        raise NothingToServe(
            f"run {run_dir.run_name} has checkpoints but no {EXPORT}/: its job writes the export when it "
            "finishes; let it finish (or resume it) first"
        )
    raise NothingToServe(
        f"run {run_dir.run_name} has nothing to serve: no {EXPORT}/ (FSDP job) and no checkpoint_NNNNNN/ (DDP job)"
    )
