"""The narrow checkpoint API over Ray Train: `save(epoch, state, metrics)` and `load_latest()`.

Ray Train owns where checkpoints go (the run's storage, local or S3), keeps the last k
(CheckpointConfig.num_to_keep) and hands the latest one back after a failure or to a re-run of the same
run name. Checkpoint directories are named `checkpoint_<epoch, zero-padded>` so they sort and read as
epochs. The state is a plain dict saved with torch.save; `write_state`/`read_state` work without Ray.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import ray.train
import torch

STATE_FILE = "state.pt"


def write_state(directory: str | Path, state: dict) -> Path:
    path = Path(directory) / STATE_FILE
    torch.save(state, path)
    return path


def read_state(directory: str | Path) -> dict:
    # weights_only: a checkpoint is data, never code to unpickle.
    return torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)


def checkpoint_name(epoch: int) -> str:
    return f"checkpoint_{epoch:06d}"


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def save(epoch: int, state: dict, metrics: dict, rank: int) -> None:
    """Report this epoch's metrics from every rank; rank 0 also uploads the checkpoint."""
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as tmp:
        write_state(tmp, state)
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(tmp),
            checkpoint_dir_name=checkpoint_name(epoch),
        )


def load_latest() -> dict | None:
    """The latest checkpoint's state, or None on a fresh start."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        return read_state(directory)
