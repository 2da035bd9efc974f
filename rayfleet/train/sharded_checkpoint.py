"""FSDP2's checkpoint files: torch.distributed.checkpoint (DCP) shards, one set per rank.

Every rank writes only its own shards (`__<rank>_0.distcp`; rank 0 adds `.metadata` and the train state)
and reports them through rayfleet.train.checkpoint, which merges all ranks' files into one
`checkpoint_step_<step>` directory. Loading reads that directory back through DCP, which also reshards if
the number of workers changed.

Loading unpickles nothing arbitrary: whoever can write the run's storage must not get code execution on
every rank. DCP's own reader unpickles `.metadata` with plain pickle and its planner loads non-tensor
items with `torch.load(weights_only=False)`; `SafeReader` admits only DCP's metadata classes (and
torch.Size, dtypes, layouts, paths) and `SafePlanner` loads those items with `weights_only=True`.
"""

from __future__ import annotations

import importlib
import io
import pickle
from functools import cache

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultLoadPlanner, FileSystemReader
from torch.distributed.checkpoint._traverse import set_element  # noqa: PLC2701 (what DCP's planner uses)
from torch.distributed.checkpoint.metadata import StorageMeta
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


def save(step: int, model, optimizer, train_state: dict, metrics: dict, rank: int) -> None:
    model_sd, optim_sd = get_state_dict(model, optimizer)

    def write(directory):
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=directory)
        if rank == 0:
            checkpoint.write_train_state(directory, {**train_state, "step": step})

    checkpoint.report(metrics, checkpoint.step_checkpoint_name(step), write)


def load_latest(model, optimizer) -> dict | None:
    """Restore model and optimizer shards from the latest checkpoint; return its train state, or None."""
    with checkpoint.latest() as directory:
        if directory is None:
            return None
        model_sd, optim_sd = get_state_dict(model, optimizer)  # also creates the optimizer's state to fill
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, storage_reader=SafeReader(directory), planner=SafePlanner())
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        return checkpoint.read_train_state(directory)
