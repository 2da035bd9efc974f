"""Checkpoint state round trip and names."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F

from rayfleet.core.config import load_config
from rayfleet.train import checkpoint
from rayfleet.train.ddp import Runtime, build_model
from rayfleet.train.ddp.config import DDPConfig


def _step(model, optimizer, seed):
    torch.manual_seed(seed)
    x, y = torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,))
    loss = F.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _job_model(data_dir):
    """The model and optimizer as the DDP job builds them on CPU (fp32, small convolutions as GEMM, fused Adam)."""
    cfg = load_config(DDPConfig, None, [f"data_dir={data_dir}", "precision=fp32"])
    return build_model(cfg, Runtime.resolve(cfg, torch.device("cpu")))


def test_state_round_trip_continues_training_identically(tmp_path, small_dataset):
    torch.manual_seed(0)
    model, optimizer = _job_model(small_dataset)
    _step(model, optimizer, seed=1)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 3,
        "attempt": 0,
        "seed": 0,
        "rng": checkpoint.rng_state(),
    }
    checkpoint.write_state(tmp_path, state)
    expected_next = _step(model, optimizer, seed=2)

    restored, restored_opt = _job_model(small_dataset)
    loaded = checkpoint.read_state(tmp_path)
    restored.load_state_dict(loaded["model"])
    restored_opt.load_state_dict(loaded["optimizer"])
    checkpoint.set_rng_state(loaded["rng"])
    assert loaded["epoch"] == 3
    assert _step(restored, restored_opt, seed=2) == expected_next
    for (name, p), q in zip(model.state_dict().items(), restored.state_dict().values(), strict=True):
        assert torch.equal(p, q), name  # bit-identical after the step, not merely close


def test_checkpoint_names_are_zero_padded_epochs():
    assert checkpoint.checkpoint_name(7) == "checkpoint_000007"
    assert sorted(checkpoint.checkpoint_name(e) for e in (10, 9, 100)) == [
        "checkpoint_000009",
        "checkpoint_000010",
        "checkpoint_000100",
    ]


def test_an_epoch_checkpoint_is_written_and_uploaded_in_the_background_from_a_copy(small_dataset, monkeypatch):
    """async_checkpoint: in the loop, rank 0 only copies the state into CPU memory; the file is written by the
    upload function Ray Train runs in its upload thread (then its own upload), so a step taken meanwhile does
    not leak into the checkpoint, and the next save would wait until it is done (one in flight). The other
    ranks report the row alone, in the same mode (Ray Train pairs every rank's report). Off: written and
    uploaded in the report call itself."""
    import ray.train

    from rayfleet.train.ddp.state import Resume, save_epoch

    calls = []
    uploaded = SimpleNamespace(persist_current_checkpoint=lambda local, name: ("persisted", local.path, name))
    context = SimpleNamespace(get_storage=lambda: uploaded, get_world_rank=lambda: 0, get_world_size=lambda: 2)
    monkeypatch.setattr(ray.train, "get_context", lambda: context)
    report = lambda metrics, checkpoint=None, **kw: calls.append((metrics, checkpoint, kw))  # noqa: E731
    monkeypatch.setattr(ray.train, "report", report)
    model, optimizer = _job_model(small_dataset)
    _step(model, optimizer, seed=1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    carried = {"preemptions": 0, "steps_redone": 0}
    cfg = load_config(DDPConfig, None, [f"data_dir={small_dataset}"])
    assert cfg.async_checkpoint  # the default
    uploads = [checkpoint.Uploads(), checkpoint.Uploads()]  # one per rank's process
    for rank in (0, 1):
        save_epoch(model, optimizer, cfg, Resume(), carried, {"epoch": 3}, rank, uploads[rank])
    (row0, local, kwargs0), (row1, none, kwargs1) = calls
    upload = ray.train.CheckpointUploadMode.ASYNC
    assert kwargs0["checkpoint_upload_mode"] == kwargs1["checkpoint_upload_mode"] == upload
    assert none is None and row1 == row0 == {"epoch": 3} and kwargs0["delete_local_checkpoint_after_upload"]
    assert list(Path(local.path).iterdir()) == []  # nothing written in the loop, not even the seal
    _step(model, optimizer, seed=2)  # the loop goes on while the upload thread has not run yet
    assert not uploads[0].idle.is_set() and uploads[1].idle.is_set()  # rank 0's is in flight: the next save waits
    persisted = kwargs0["checkpoint_upload_fn"](local, kwargs0["checkpoint_dir_name"])  # Ray Train's thread
    assert persisted == ("persisted", local.path, "checkpoint_000003") and uploads[0].idle.is_set()
    saved = checkpoint.read_state(local.path)
    assert all(torch.equal(saved["model"][k], v) for k, v in before.items())  # the state at the save, not after
    assert saved["epoch"] == 3
    shutil.rmtree(local.path)
    calls.clear()
    cfg = load_config(DDPConfig, None, [f"data_dir={small_dataset}", "async_checkpoint=false"])
    monkeypatch.setattr(ray.train, "report", lambda metrics, checkpoint=None, **kw: calls.append(
        (sorted(p.name for p in Path(checkpoint.path).iterdir()) if checkpoint else None, kw)))  # fmt: skip
    for rank in (0, 1):
        save_epoch(model, optimizer, cfg, Resume(), carried, {"epoch": 3}, rank, uploads[rank])
    sealed = ["rayfleet-complete.0.json", "state.pt"]  # rank 0's seal, written after its state
    assert calls == [(sealed, {"checkpoint_dir_name": "checkpoint_000003"}), (None, {})]  # Ray's SYNC default
