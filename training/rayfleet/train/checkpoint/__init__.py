"""The one checkpoint helper over Ray Train, used by DDP, FSDP2 and DeepSpeed: `report` (asynchronous saves:
FSDP2's `report_written`, DDP's `Uploads`) and `latest`.

Ray Train owns where checkpoints go (the run's storage, local or S3), keeps the last k
(CheckpointConfig.num_to_keep) and hands the latest one back after a failure or to a re-run of the same
run name. Every rank that writes files reports its own temporary directory; Ray Train merges them into
one checkpoint directory. Names sort and read as progress: `checkpoint_<epoch>` (DDP) and
`checkpoint_step_<step>` (FSDP, DeepSpeed). Whole-model state is a plain dict saved with torch.save and
loaded with `weights_only=True`; the small train state beside sharded files is JSON.

Every writing rank seals what it wrote last (rayfleet/core/checkpoint_seal.py); every resume reads only a
complete checkpoint, from a private copy of its own (`latest`).
"""

from __future__ import annotations

import json
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import ray.train
import torch

from rayfleet.core import checkpoint_seal
from rayfleet.train.checkpoint.resume import NoCompleteCheckpoint, latest  # noqa: F401 (the readers' API)

STATE_FILE = "state.pt"
TRAIN_STATE = "train_state.json"


def checkpoint_name(epoch: int) -> str:
    return f"checkpoint_{epoch:06d}"


def step_checkpoint_name(step: int) -> str:
    return f"checkpoint_step_{step:07d}"


def seal(directory: Path, writers: int | None) -> None:
    """This rank's completeness seal over what it wrote into `directory`, put in last (checkpoint_seal.py).
    `writers`: how many ranks write files into this checkpoint (None: every rank of the run)."""
    context = ray.train.get_context()
    checkpoint_seal.seal(Path(directory), context.get_world_rank(), writers or context.get_world_size())


def report(metrics: dict, name: str, write: Callable[[Path], None] | None, writers: int | None = None) -> None:
    """Report this rank's metrics; with `write`, also this rank's files of checkpoint `name`, sealed.

    `write` fills a fresh local directory; ranks that pass None report metrics only. `writers`: how many ranks
    pass a `write` (None: all of them)."""
    if write is None:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as tmp:
        write(Path(tmp))
        seal(Path(tmp), writers)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(tmp), checkpoint_dir_name=name)


def report_written(metrics: dict, name: str, directory: Path) -> None:
    """Report this rank's files of checkpoint `name`, already written to `directory` (an asynchronous save's).

    Ray Train copies them to the run's storage from a thread of its own (one at a time, in report order),
    registers the checkpoint once the copy is whole, and then deletes `directory`: the loop does not wait
    for the copy of a large checkpoint, and a run killed during it resumes from the one before. Ray Train
    waits for it before the run ends. Every rank writes files here: each seals its own."""
    seal(directory, None)
    ray.train.report(
        metrics,
        checkpoint=ray.train.Checkpoint.from_directory(directory),
        checkpoint_dir_name=name,
        checkpoint_upload_mode=ray.train.CheckpointUploadMode.ASYNC,
        delete_local_checkpoint_after_upload=True,
    )


class Uploads:
    """This rank's background checkpoints: `report` is `report` with `write` run in Ray Train's upload thread
    just before the upload, so the loop waits for neither, and `write` must read only what the loop no longer
    changes (a copy in CPU memory: `staged`). One in flight at a time: call `wait` before making the next
    copy; it returns at once unless the previous checkpoint is still being written or uploaded. Ray Train
    uploads in report order, registers a checkpoint only once it is whole (a run killed during the write or the
    upload resumes from the one before) and then deletes the local copy; a failed write or upload fails the
    run at its next report rather than lose the checkpoint silently."""

    def __init__(self) -> None:
        self.idle = threading.Event()
        self.idle.set()

    def wait(self) -> None:
        self.idle.wait()

    def report(self, metrics: dict, name: str, write: Callable[[Path], None] | None, writers: int | None = None):
        mode = ray.train.CheckpointUploadMode.ASYNC
        if write is None:
            ray.train.report(metrics, checkpoint_upload_mode=mode)
            return
        # A DeveloperAPI (the run's storage context): Ray Train's own upload, after the write, in its thread.
        storage = ray.train.get_context().get_storage()

        def write_and_upload(local: ray.train.Checkpoint, dir_name: str) -> ray.train.Checkpoint:
            try:
                write(Path(local.path))
                seal(Path(local.path), writers)
                return storage.persist_current_checkpoint(local, dir_name)
            finally:
                self.idle.set()

        self.idle.clear()
        ray.train.report(
            metrics,
            checkpoint=ray.train.Checkpoint.from_directory(tempfile.mkdtemp(prefix=f"{name}-")),
            checkpoint_dir_name=name,
            checkpoint_upload_mode=mode,
            delete_local_checkpoint_after_upload=True,
            checkpoint_upload_fn=write_and_upload,
        )


def staged(state):
    """A copy of `state` (nested dicts and lists of tensors and plain values) in CPU memory, detached from
    everything the loop goes on changing: what a background write may read."""
    if isinstance(state, torch.Tensor):
        return state.detach().to("cpu", copy=True)
    if isinstance(state, dict):
        return {key: staged(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(staged(value) for value in state)
    return state


def write_state(directory: str | Path, state: dict) -> Path:
    path = Path(directory) / STATE_FILE
    torch.save(state, path)
    return path


def read_state(directory: str | Path) -> dict:
    # weights_only: a checkpoint is data, never code to unpickle.
    return torch.load(Path(directory) / STATE_FILE, map_location="cpu", weights_only=True)


def write_train_state(directory: Path, train_state: dict) -> None:
    (directory / TRAIN_STATE).write_text(json.dumps(train_state))


def read_train_state(directory: Path) -> dict:
    return json.loads((directory / TRAIN_STATE).read_text())


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
