"""Sharded checkpoints for FSDP: torch.distributed.checkpoint (DCP) files, one set per rank, in one Ray checkpoint.

Every rank writes only its own shards (`__<rank>_0.distcp`; rank 0 adds `.metadata` and `train_state.json`)
into a local temporary directory and reports it; Ray Train merges all ranks' files into the same
`checkpoint_step_<step>` directory of the run's storage (local or S3) and keeps the last k. Loading reads
that directory back through DCP, which also reshards if the number of workers changed.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import ray.train
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

TRAIN_STATE = "train_state.json"


def checkpoint_name(step: int) -> str:
    return f"checkpoint_step_{step:07d}"


def save(step: int, model, optimizer, train_state: dict, metrics: dict, rank: int) -> None:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    with tempfile.TemporaryDirectory() as tmp:
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp)
        if rank == 0:
            (Path(tmp) / TRAIN_STATE).write_text(json.dumps({**train_state, "step": step}))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp),
                         checkpoint_dir_name=checkpoint_name(step))  # fmt: skip


def load_latest(model, optimizer) -> dict | None:
    """Restore model and optimizer shards from the latest checkpoint; return its train state, or None."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        model_sd, optim_sd = get_state_dict(model, optimizer)  # also creates the optimizer's state to fill
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=directory)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return json.loads((Path(directory) / TRAIN_STATE).read_text())
