"""FSDPStrategy on one CPU process (gloo, world size 1, a plain process group: no Ray): device-side loss and
grad norm, the asynchronous checkpoint (staged at the save call, written in the background, reported once
written, loaded back identically, a failed write raised), the KV-cache-free export forward, and
reshard_after_forward."""

from __future__ import annotations

import shutil
import threading
import traceback
from contextlib import contextmanager

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from torch.distributed.tensor import DTensor

from rayfleet.core.config import load_config
from rayfleet.train import checkpoint
from rayfleet.train.fsdp.config import FSDPConfig
from tools import tiny_lm


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp-strategy")
    dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=0, world_size=1)
    tiny_lm.build(root / "model", tiny_lm.corpus(400))
    (root / "corpus.txt").write_text("unused")
    yield root
    dist.destroy_process_group()


def strategy(root, *overrides: str, model_dir=None):
    from rayfleet.train.fsdp.strategy import FSDPStrategy

    model_dir = model_dir or root / "model"
    base = [f"model={model_dir}", f"data={root / 'corpus.txt'}", "grad_accum=2", *overrides]
    cfg = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", base)
    torch.manual_seed(0)
    return FSDPStrategy(cfg, model_dir, torch.device("cpu"), rank=0)


def batch(s, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, s.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(seed))


def train(s, seed: int = 0) -> None:
    for micro in range(s.cfg.grad_accum):
        s.micro_step(batch(s, seed + micro))
    s.step()


def snapshot(s) -> dict[str, torch.Tensor]:
    """Every parameter and every AdamW state tensor, full and detached."""
    out = {f"param/{k}": v.full_tensor().clone() for k, v in s.model.state_dict().items()}
    for index, state in enumerate(s.optimizer.state.values()):
        for key, value in state.items():
            out[f"optim/{index}/{key}"] = (value.full_tensor() if isinstance(value, DTensor) else value).clone()
    return out


@pytest.fixture
def storage(root, tmp_path, monkeypatch):
    """Ray Train's part replaced: a report copies the rank's files into `storage/<name>`; `latest` hands the
    directory `resume` names back."""
    reports, resume = [], {}

    def report_written(metrics, name, directory):
        reports.append((name, metrics))
        shutil.move(directory, tmp_path / name)  # as Ray Train: uploaded, then the local copy deleted

    @contextmanager
    def latest(required=()):
        yield resume.get("from")

    monkeypatch.setattr(checkpoint, "report_written", report_written)
    monkeypatch.setattr(checkpoint, "latest", latest)
    return {"dir": tmp_path, "reports": reports, "resume": resume}


def test_the_loss_and_the_grad_norm_stay_on_the_device(root, monkeypatch):
    """Reading either (.item(), float()) would make the host wait for the device every micro-batch."""
    s = strategy(root)
    read = []
    monkeypatch.setattr(torch.Tensor, "item", lambda self: read.append("item") or 0.0)
    monkeypatch.setattr(torch.Tensor, "__float__", lambda self: read.append("float") or 0.0)
    loss = s.micro_step(batch(s))
    norm = s.step()
    assert read == []
    monkeypatch.undo()
    assert isinstance(loss, torch.Tensor) and not loss.requires_grad and 0 < loss.item() < 20
    assert isinstance(norm, torch.Tensor) and norm.full_tensor().item() > 0


def test_an_async_checkpoint_holds_the_saved_step_and_loads_identically(root, storage, monkeypatch):
    gate, write_data = threading.Event(), FileSystemWriter.write_data

    def gated(self, plan, planner):  # the files are written only after the loop has changed the model
        assert gate.wait(timeout=60)
        return write_data(self, plan, planner)

    monkeypatch.setattr(FileSystemWriter, "write_data", gated)
    s = strategy(root)
    train(s)
    saved = snapshot(s)
    s.save(1, {"attempt": 0, "seed": 0, "strategy": "fsdp"}, {"step": 1, "loss": 6.0})
    assert s.checkpoints.writing is not None and storage["reports"] == []  # started, not yet reported
    assert s.finish_checkpoint(wait=False) == {} and storage["reports"] == []  # not written yet: left
    train(s, seed=10)  # the loop goes on while it is written: the checkpoint keeps step 1's state
    assert not torch.equal(snapshot(s)["param/lm_head.weight"], saved["param/lm_head.weight"])
    gate.set()
    finished = s.finish_checkpoint()
    assert finished["checkpoint_step"] == 1 and finished["checkpoint_write_s"] > 0
    assert finished["checkpoint_wait_s"] >= 0
    [(name, metrics)] = storage["reports"]
    assert name == "checkpoint_step_0000001"
    assert metrics == {"step": 1, "loss": 6.0, "checkpoint_write_s": finished["checkpoint_write_s"]}
    assert s.finish_checkpoint() == {}  # reported once

    storage["resume"]["from"] = storage["dir"] / name
    fresh = strategy(root)
    expected = {"attempt": 0, "seed": 0, "strategy": "fsdp", "step": 1, "resumed_from": "checkpoint_step_0000001"}
    assert fresh.load() == expected
    loaded = snapshot(fresh)
    assert loaded.keys() == saved.keys() and any(k.startswith("optim/") for k in saved)
    assert all(torch.equal(loaded[k], saved[k]) for k in saved)
    s.close()
    fresh.close()


def test_the_staging_buffers_are_reused_and_one_checkpoint_is_in_flight_at_a_time(root, storage):
    s = strategy(root)
    train(s)
    s.save(1, {"attempt": 0}, {"step": 1})
    staged = {id(buffer) for buffer in s.checkpoints.stager._state_dict_stager._cached_storage_mapping.values()}
    with pytest.raises(RuntimeError, match="still being written"):
        s.checkpoints.start(2, s.model, s.optimizer, {}, {})
    train(s, seed=10)
    s.save(2, {"attempt": 0}, {"step": 2})  # finishes step 1's first
    again = {id(buffer) for buffer in s.checkpoints.stager._state_dict_stager._cached_storage_mapping.values()}
    assert staged and again == staged
    s.close()
    assert [name for name, _ in storage["reports"]] == ["checkpoint_step_0000001", "checkpoint_step_0000002"]


def test_a_failed_background_write_raises_at_the_next_wait_and_reports_nothing(root, storage, monkeypatch):
    def full_disk(self, plan, planner):
        raise OSError("No space left on device")

    monkeypatch.setattr(FileSystemWriter, "write_data", full_disk)
    s = strategy(root)
    train(s)
    s.save(1, {"attempt": 0}, {"step": 1})  # returns: the write fails in the background
    directory = s.checkpoints.writing.directory
    with pytest.raises(CheckpointException) as err:
        s.finish_checkpoint()
    assert "No space left on device" in "".join(traceback.format_exception(err.value)) + repr(err.value.failures)
    assert storage["reports"] == [] and not directory.exists()


def test_a_blocking_save_and_async_checkpoint_false_write_at_once(root, storage, monkeypatch):
    written = []
    monkeypatch.setattr(checkpoint, "report", lambda metrics, name, write: written.append(name))
    s = strategy(root, "async_checkpoint=false")
    assert s.checkpoints is None
    s.save(1, {"attempt": 0}, {"step": 1})
    assert written == ["checkpoint_step_0000001"] and s.finish_checkpoint() == {}
    a = strategy(root)
    a.save(2, {"attempt": 0}, {"step": 2})
    a.save(3, {"attempt": 0}, {"step": 3, "preempted": True}, blocking=True)  # a notice's: step 2's reported first
    assert [name for name, _ in storage["reports"]] == ["checkpoint_step_0000002"]
    assert written[1:] == ["checkpoint_step_0000003"] and a.checkpoints.writing is None


def test_the_export_forward_runs_without_a_kv_cache(root):
    s = strategy(root)
    seen, forward = [], s.model.forward

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return forward(*args, **kwargs)

    s.model.forward = spy
    full, logits = s.gather_for_export(batch(s)[:1])
    assert [kwargs.get("use_cache", "unset") for kwargs in seen] == [False]
    assert logits.shape == (1, 16, s.config.vocab_size) and "lm_head.weight" in full


@pytest.mark.parametrize(("setting", "gathered"), [("true", False), ("false", True)])
def test_reshard_after_forward_decides_whether_blocks_stay_gathered_for_backward(root, setting, gathered):
    """After the forward, a block whose parameters are still gathered shows plain tensors; a resharded one
    shows its DTensor shards again (and gathers them again in backward). The last block always stays."""
    s = strategy(root, f"reshard_after_forward={setting}")
    first, last = s.model.gpt_neox.layers[0], s.model.gpt_neox.layers[-1]
    loss = s.model(input_ids=batch(s), labels=batch(s), use_cache=False).loss
    assert all(not isinstance(p, DTensor) for p in first.parameters()) == gathered
    assert all(not isinstance(p, DTensor) for p in last.parameters())
    loss.backward()
    assert all(isinstance(p, DTensor) for p in first.parameters())  # resharded after backward either way


def test_priming_after_a_step_makes_the_buffers_the_first_checkpoint_then_reuses(root, storage):
    """The staging memory is made once, after the first step, not in the first checkpoint's pause; priming
    takes no optimizer step of its own (Adam's step count, and so its bias correction, stay the same)."""
    s = strategy(root)
    train(s)
    counts = [state["step"].clone() for state in s.optimizer.state.values()]

    def buffers():
        return {id(b) for b in s.checkpoints.stager._state_dict_stager._cached_storage_mapping.values()}

    assert not buffers()
    assert s.prime_checkpoints() >= 0
    primed = buffers()
    assert primed
    s.save(1, {"attempt": 0}, {"step": 1})
    assert buffers() == primed  # the first checkpoint copied into the primed memory
    assert all(torch.equal(a, state["step"]) for a, state in zip(counts, s.optimizer.state.values(), strict=True))
    s.close()
    assert [name for name, _ in storage["reports"]] == ["checkpoint_step_0000001"]


def test_a_model_published_as_pytorch_bin_loads_the_same_weights(root):
    """dolly-v2's main revision has no safetensors, only pytorch_model.bin: rank 0 reads it with torch's
    weights-only unpickler and the model holds exactly what the safetensors copy gives."""
    from safetensors.torch import load_file

    as_bin = root / "model-bin"
    shutil.copytree(root / "model", as_bin)
    (shards,) = list(as_bin.glob("*.safetensors"))
    torch.save(load_file(shards), as_bin / "pytorch_model.bin")
    shards.unlink()
    expected = {k: v.full_tensor() for k, v in strategy(root).model.state_dict().items()}
    loaded = {k: v.full_tensor() for k, v in strategy(root, model_dir=as_bin).model.state_dict().items()}
    assert loaded.keys() == expected.keys()
    assert all(torch.equal(loaded[k], expected[k]) for k in expected)
