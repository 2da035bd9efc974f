"""FSDP2's checkpoint files: torch.distributed.checkpoint (DCP) shards, one set per rank.

Every rank writes only its own shards (`__<rank>_0.distcp`; rank 0 adds `.metadata` and the train state)
and reports them through rayfleet.train.checkpoint, which merges all ranks' files into one
`checkpoint_step_<step>` directory. Loading reads that directory back through DCP, which also reshards if
the number of workers changed.

Loading unpickles nothing arbitrary: whoever can write the run's storage must not get code execution on
every rank. DCP's own reader unpickles `.metadata` with plain pickle and its planner loads non-tensor
items with `torch.load(weights_only=False)`; `SafeReader` admits only DCP's metadata classes (and
torch.Size, dtypes, layouts, paths) and `SafePlanner` loads those items with `weights_only=True`.

The regular checkpoints are asynchronous (`AsyncCheckpoints`): the loop waits only while the shards are copied
into CPU memory, DCP writes them from a thread, and the checkpoint is reported once written. Loading is the same
for both: the files are DCP's either way.
"""

from __future__ import annotations

import importlib
import io
import pickle
import shutil
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element  # noqa: PLC2701 (what DCP's planner uses)
from torch.distributed.checkpoint.metadata import StorageMeta
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from rayfleet.train import checkpoint

_METADATA_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem")
_ALLOWED = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "Path")}


@cache
def _metadata_classes() -> frozenset[tuple[str, str]]:
    """(module, name) of every class DCP's metadata modules define themselves: exact pairs, so neither a name
    those modules merely import (`os`) nor a dotted name walked attribute by attribute (`os.system`, which
    pickle protocol 4 resolves from the module) passes."""
    return frozenset(
        (module, name)
        for module in _METADATA_MODULES
        for name, value in vars(importlib.import_module(module)).items()
        if isinstance(value, type) and value.__module__ == module
    )


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _metadata_classes() or (module, name) in _ALLOWED:
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise pickle.UnpicklingError(f"checkpoint metadata refers to {module}.{name}, which a checkpoint never holds")


class SafeReader(FileSystemReader):
    def read_metadata(self, *args, **kwargs):
        rank = kwargs.get("rank")
        with self.fs.create_stream(self._get_metadata_path(rank), "rb") as stream:
            metadata = _MetadataUnpickler(stream).load()
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


class SafePlanner(DefaultLoadPlanner):
    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        loaded = torch.load(value, weights_only=True)  # plain data (lr, betas, flags), never objects
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded


def _state(model, optimizer) -> dict:
    model_sd, optim_sd = get_state_dict(model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def save(step: int, model, optimizer, train_state: dict, metrics: dict, rank: int) -> None:
    """A checkpoint written and reported before it returns: a preemption notice's, or every one with
    async_checkpoint=false."""
    state = _state(model, optimizer)

    def write(directory):
        dcp.save(state, checkpoint_id=directory)
        if rank == 0:
            checkpoint.write_train_state(directory, {**train_state, "step": step})

    checkpoint.report(metrics, checkpoint.step_checkpoint_name(step), write)


@dataclass
class _Writing:
    """A checkpoint whose files DCP is writing in the background."""

    step: int
    directory: Path
    future: Future
    train_state: dict
    metrics: dict
    started: float
    written: float | None = None  # when the files were all written (perf_counter), set by the writing thread


class ReusableStager(DefaultStager):
    """DCP's stager, reusable across saves on every torch this project meets. Torch 2.11-2.13's DefaultStager
    closes its inner copier after every stage, and closing clears the copier's dispatch table and its cached
    buffers: the next stage of a state dict holding a class object (FSDP2's DTensor state does) raises
    `KeyError: <class 'type'>` (seen on an H100 with torch 2.11 at the second save; pytorch's own report says
    the same of 2.13), and every save would allocate and pin its buffers anew. Here the per-stage close does
    nothing; `close` closes the copier for real, once, after the last save. Torch 2.14 does not close per
    stage, so there this changes nothing."""

    def __init__(self, options: StagingOptions):
        super().__init__(options)
        inner = getattr(self, "_state_dict_stager", None)  # private to torch: where it is missing, nothing to do
        self._close_inner = getattr(inner, "close", None)
        if self._close_inner is not None:
            inner.close = lambda: None

    def close(self) -> None:
        if self._close_inner is not None:
            self._close_inner()
        super().close()


def async_supported() -> str | None:
    """None where the checkpoint stager copies an FSDP2 state dict (class objects included) save after save,
    else why not. Probed, twice, not guessed from a version."""
    made = ReusableStager(StagingOptions(False, False, False, False))
    try:
        for _ in range(2):
            made.stage({"probe": int, "tensor": torch.ones(2)})
    except Exception as exc:
        return f"torch {torch.__version__}'s checkpoint stager cannot copy a class object ({type(exc).__name__}: {exc})"
    finally:
        made.close()
    return None


class AsyncCheckpoints:
    """This rank's regular checkpoints, written in the background: one at a time, reported once written.

    `start` blocks only while the shards are copied into CPU memory; DCP writes the files from a thread.
    `finish` waits for them (a failed write raises there: a lost checkpoint fails the run rather than vanish),
    adds the train state and reports the checkpoint. Ray Train needs every rank's report of a checkpoint at
    the same call, so every rank calls `start`, `finish` and `finish_if_written` at the same points."""

    def __init__(self, device: torch.device, rank: int, report: Callable[[dict, str, Path], None] | None = None):
        self.device, self.rank, self.report = device, rank, report
        cuda = device.type == "cuda"
        # Staging buffers in pinned memory on a GPU, so the copy runs at full speed; allocated by the first save
        # and reused by every later one (the stager keys them by the storage they copy). Staging blocks: the next
        # optimizer step must not change a shard while it is copied.
        options = StagingOptions(
            use_pinned_memory=cuda, use_shared_memory=False, use_async_staging=False, use_non_blocking_copy=cuda
        )
        self.stager = ReusableStager(options)
        # DCP's writing thread exchanges plans and ends with a barrier while the training thread runs its own
        # collectives: a gloo group of its own keeps the two apart (and async_save needs a CPU backend).
        self.group = dist.new_group(backend="gloo")
        self.writing: _Writing | None = None

    def prime(self, model, optimizer) -> float:
        """Stage the state once, writing nothing, so the staging buffers exist before the first checkpoint:
        that checkpoint then holds the loop only for its copy, not also for allocating (on a GPU: pinning)
        host memory for the whole state, which held an H100's loop about 10 s for a 1.4B model's 16.8 GB.
        Call it once the optimizer has state (after a first step): asking for the state dict earlier would
        make it by a step of its own. Returns the seconds it took."""
        started = time.perf_counter()
        self.stager.stage(_state(model, optimizer))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the copies were queued without blocking
        return time.perf_counter() - started

    def start(self, step: int, model, optimizer, train_state: dict, metrics: dict) -> None:
        if self.writing is not None:  # its files may still be read from the staging buffers this save reuses
            raise RuntimeError(f"checkpoint of step {self.writing.step} is still being written: finish it first")
        started = time.perf_counter()
        directory = Path(tempfile.mkdtemp(prefix=f"{checkpoint.step_checkpoint_name(step)}-"))
        try:
            future = dcp.async_save(
                _state(model, optimizer), checkpoint_id=directory, process_group=self.group, async_stager=self.stager
            )
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        writing = _Writing(step, directory, future, train_state, dict(metrics), started)
        future.add_done_callback(lambda _: setattr(writing, "written", time.perf_counter()))
        self.writing = writing

    def finish_if_written(self) -> dict:
        """Report the checkpoint being written if every rank has written its files (a collective), else
        leave it: returns what `finish` does, or {}."""
        if self.writing is None:
            return {}
        done = torch.tensor([float(self.writing.future.done())], device=self.device)
        dist.all_reduce(done, op=dist.ReduceOp.MIN)
        return self.finish() if done.item() else {}

    def finish(self) -> dict:
        """Wait for the checkpoint being written and report it: {} when none, else the metrics row's
        checkpoint_step, checkpoint_write_s (from its save call to its files written) and checkpoint_wait_s
        (how long this call blocked the loop)."""
        writing, self.writing = self.writing, None
        if writing is None:
            return {}
        waited = time.perf_counter()
        try:
            writing.future.result()
            if self.rank == 0:
                checkpoint.write_train_state(writing.directory, {**writing.train_state, "step": writing.step})
            write_s = (writing.written or time.perf_counter()) - writing.started  # the callback may lag result()
            metrics = {**writing.metrics, "checkpoint_write_s": write_s}
            report = self.report or checkpoint.report_written  # looked up late: tests replace Ray Train's
            report(metrics, checkpoint.step_checkpoint_name(writing.step), writing.directory)
        except BaseException:
            shutil.rmtree(writing.directory, ignore_errors=True)
            raise
        return {
            "checkpoint_step": writing.step,
            "checkpoint_write_s": write_s,
            "checkpoint_wait_s": time.perf_counter() - waited,
        }

    def close(self) -> None:
        """After the last checkpoint: the staging buffers go."""
        self.finish()
        self.stager.close()


def load_latest(model, optimizer) -> dict | None:
    """Restore model and optimizer shards from the newest complete checkpoint (checkpoint.latest); return its
    train state with `resumed_from` (the checkpoint's name) added, or None."""
    with checkpoint.latest(required=[checkpoint.TRAIN_STATE, ".metadata"]) as directory:
        if directory is None:
            return None
        model_sd, optim_sd = get_state_dict(model, optimizer)  # also creates the optimizer's state to fill
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, storage_reader=SafeReader(directory), planner=SafePlanner())
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return {**checkpoint.read_train_state(directory), "resumed_from": directory.name}
