"""FSDP's DCP checkpoints load without arbitrary unpickling: a planted payload is refused and never runs."""

from __future__ import annotations

import json
import os
import pickle
import traceback
from types import SimpleNamespace

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from rayfleet.train.checkpoint.sharded import SafePlanner, SafeReader


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['PWNED']}",))


def _text(exc: BaseException) -> str:
    """DCP wraps each rank's failure in a CheckpointException that carries the rank's traceback."""
    return "".join(traceback.format_exception(exc)) + repr(getattr(exc, "failures", ""))


def _trained():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95))
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    return model, opt


def _load(directory):
    model, opt = torch.nn.Linear(4, 2), None
    opt = torch.optim.AdamW(model.parameters(), lr=5.0)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    dcp.load(state, storage_reader=SafeReader(directory), planner=SafePlanner())
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    return model, opt


def test_a_checkpoint_round_trips_through_the_safe_reader(tmp_path):
    model, opt = _trained()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=tmp_path)
    loaded, loaded_opt = _load(tmp_path)
    assert torch.equal(loaded.weight, model.weight)
    assert loaded_opt.param_groups[0]["lr"] == 1e-3 and loaded_opt.param_groups[0]["betas"] == (0.9, 0.95)


def test_planted_metadata_is_refused_and_does_not_run(tmp_path, monkeypatch):
    pwned = tmp_path / "pwned"
    monkeypatch.setenv("PWNED", str(pwned))
    model, opt = _trained()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "ckpt")
    (tmp_path / "ckpt" / ".metadata").write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointException) as err:
        _load(tmp_path / "ckpt")
    assert "refers to posix.system, which a checkpoint never holds" in _text(err.value)
    assert not pwned.exists()


def test_a_planted_object_among_the_plain_items_is_refused(tmp_path, monkeypatch):
    pwned = tmp_path / "pwned"
    monkeypatch.setenv("PWNED", str(pwned))
    model, opt = _trained()
    msd, osd = get_state_dict(model, opt)
    osd["param_groups"][0]["lr"] = Payload()  # what a writer of the storage could put in a bytes item
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "ckpt")
    assert not pwned.exists()
    with pytest.raises(CheckpointException) as err:
        _load(tmp_path / "ckpt")
    assert "Weights only load failed" in _text(err.value)
    assert not pwned.exists()
    # DCP's own planner would have run it: the point of SafePlanner.
    msd, osd = get_state_dict(*_trained())
    dcp.load({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "ckpt")
    assert pwned.exists()


def dotted_payload(command: str) -> bytes:
    """`os.system(command)` as pickle protocol 4 writes a global: STACK_GLOBAL of a module DCP's metadata comes
    from and the dotted name `os.system`, which the unpickler walks attribute by attribute from that module."""

    def text(value: str) -> bytes:
        data = value.encode()
        return b"\x8c" + bytes([len(data)]) + data  # SHORT_BINUNICODE

    module, name = "torch.distributed.checkpoint.filesystem", "os.system"
    return b"\x80\x04" + text(module) + text(name) + b"\x93" + text(command) + b"\x85R."  # ... TUPLE1 REDUCE STOP


def test_a_dotted_name_through_a_metadata_module_is_refused_and_does_not_run(tmp_path, monkeypatch):
    """Issue 27, finding 2: torch.distributed.checkpoint.filesystem imports os, so `os.system` resolved from it
    by pickle's dotted-name walk ran a command; only the classes those modules define pass now."""
    pwned = tmp_path / "pwned"
    monkeypatch.setenv("PWNED", str(pwned))
    model, opt = _trained()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=tmp_path / "ckpt")
    planted = dotted_payload(f"touch {pwned}")
    (tmp_path / "ckpt" / ".metadata").write_bytes(planted)
    with pytest.raises(CheckpointException) as err:
        _load(tmp_path / "ckpt")
    assert "refers to torch.distributed.checkpoint.filesystem.os.system" in _text(err.value)
    assert not pwned.exists()


def test_an_async_checkpoint_is_handed_to_ray_train_to_upload_in_the_background(tmp_path, monkeypatch):
    """Its files are already written: Ray Train copies them to storage from its own thread and then deletes
    them, so the loop does not wait for a large checkpoint's copy."""
    import ray.train

    from rayfleet.train import checkpoint

    calls = []
    monkeypatch.setattr(ray.train, "report", lambda metrics, **kwargs: calls.append((metrics, kwargs)))
    context = SimpleNamespace(get_world_rank=lambda: 1, get_world_size=lambda: 2)
    monkeypatch.setattr(ray.train, "get_context", lambda: context)
    (tmp_path / "__1_0.distcp").write_bytes(b"shard")
    checkpoint.report_written({"step": 1}, "checkpoint_step_0000001", tmp_path)
    seal = json.loads((tmp_path / "rayfleet-complete.1.json").read_text())  # this rank's, before the report
    assert seal == {"rank": 1, "writers": 2, "files": {"__1_0.distcp": 5}}
    [(metrics, kwargs)] = calls
    assert metrics == {"step": 1} and kwargs["checkpoint_dir_name"] == "checkpoint_step_0000001"
    assert kwargs["checkpoint"].path == str(tmp_path)
    assert kwargs["checkpoint_upload_mode"] == ray.train.CheckpointUploadMode.ASYNC
    assert kwargs["delete_local_checkpoint_after_upload"] is True


def test_async_checkpoints_are_probed_and_a_stager_that_cannot_copy_them_is_named(monkeypatch):
    """Torch 2.11's stager raised `KeyError: <class 'type'>` at an FSDP2 job's first save on an H100; the job
    must find that out before training, and fall back to synchronous checkpoints (rayfleet/train/fsdp/strategy.py)."""
    from torch.distributed.checkpoint.staging import DefaultStager

    from rayfleet.train.checkpoint import sharded as sharded_checkpoint

    assert sharded_checkpoint.async_supported() is None  # this torch (the pinned 2.14) copies class objects

    def old_stage(self, state_dict, **kwargs):
        raise KeyError(type)

    monkeypatch.setattr(DefaultStager, "stage", old_stage)
    why = sharded_checkpoint.async_supported()
    assert why and "cannot copy a class object (KeyError" in why


def test_a_stager_that_closes_after_every_stage_is_kept_open_across_saves(monkeypatch):
    """Torch 2.11-2.13's DefaultStager closes its inner copier after every stage, which clears the copier's
    dispatch table and cached buffers: the second stage of a state dict holding a class object raised
    `KeyError: <class 'type'>` at an FSDP2 job's second save on an H100 (torch 2.11). Rebuilt here on this
    torch by closing after each stage as those versions do; `ReusableStager` keeps the copier open (and its
    buffers reused) until it is closed."""
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    from rayfleet.train.checkpoint import sharded as sharded_checkpoint

    staged_by_torch = DefaultStager._stage

    def like_torch_2_11(self, state_dict, **kwargs):
        staged = staged_by_torch(self, state_dict, **kwargs)
        self._state_dict_stager.close()
        return staged

    monkeypatch.setattr(DefaultStager, "_stage", like_torch_2_11)
    options = StagingOptions(False, False, False, False)
    state = {"cls": int, "t": torch.arange(3.0)}
    plain = DefaultStager(options)
    plain.stage(state)
    with pytest.raises(KeyError):
        plain.stage(state)
    made = sharded_checkpoint.ReusableStager(options)
    first = made.stage(state)
    state["t"].add_(1)  # a training step between two saves: the same parameters, new values
    second = made.stage(state)
    assert second["cls"] is int and torch.equal(second["t"], torch.arange(3.0) + 1)
    assert second["t"].data_ptr() == first["t"].data_ptr()  # the buffer of the first save, reused
    assert sharded_checkpoint.async_supported() is None
    made.close()
    with pytest.raises(KeyError):  # released: closed for real
        made.stage(state)


def test_fsdp_resumes_from_the_newest_complete_checkpoint_when_a_shard_is_missing(tmp_path, capsys):
    """The latest kept checkpoint lost a rank's shard file: the job's load (load_latest) restores the one
    before, whole, and names it; Ray Train's worker API through Ray's own seam (ray_storage_seam.py)."""
    from rayfleet.train.checkpoint import sharded as sharded_checkpoint
    from tests.unit.train.ray_storage_seam import RunStorage, installed

    model, opt = _trained()
    first = model.weight.detach().clone()
    with installed(RunStorage(tmp_path)) as session:
        sharded_checkpoint.save(1, model, opt, {"attempt": 0}, {"step": 1}, rank=0)
        session.register("checkpoint_step_0000001")
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        sharded_checkpoint.save(2, model, opt, {"attempt": 0}, {"step": 2}, rank=0)
        (
            session.register("checkpoint_step_0000002") and session.folder("checkpoint_step_0000002") / "__0_0.distcp"
        ).unlink()
        fresh = torch.nn.Linear(4, 2)
        fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=5.0)
        state = sharded_checkpoint.load_latest(fresh, fresh_opt)
    assert state == {"attempt": 0, "step": 1, "resumed_from": "checkpoint_step_0000001"}
    assert torch.equal(fresh.weight, first)
    assert capsys.readouterr().out.startswith(
        "rayfleet: checkpoint_step_0000002 is incomplete (__0_0.distcp is missing)"
    )
