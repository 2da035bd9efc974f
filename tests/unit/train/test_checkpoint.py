"""Checkpoint state round trip and names."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
import torch.nn.functional as F

from rayfleet.core.config import load_config
from rayfleet.train import checkpoint
from rayfleet.train.ddp import Runtime, build_model
from rayfleet.train.ddp_config import DDPConfig


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


def test_an_epoch_checkpoint_is_uploaded_in_the_background_or_in_the_loop_as_configured(small_dataset, monkeypatch):
    """async_checkpoint: rank 0 writes the whole state to a local directory and hands it to Ray Train's upload
    thread (which registers it once whole and deletes the copy); the other ranks report the row alone, in the
    same mode (Ray Train pairs every rank's report). Off: the upload happens in the report call itself."""
    import ray.train

    from rayfleet.train.ddp_state import Resume, save_epoch

    calls = []

    def report(metrics, checkpoint=None, **kwargs):
        files = sorted(p.name for p in Path(checkpoint.path).iterdir()) if checkpoint else None
        calls.append((metrics, files, kwargs))
        if checkpoint and kwargs.get("delete_local_checkpoint_after_upload"):
            shutil.rmtree(checkpoint.path)  # as Ray Train's upload thread does

    monkeypatch.setattr(ray.train, "report", report)
    model, optimizer = _job_model(small_dataset)
    carried = {"preemptions": 0, "steps_redone": 0}
    for async_checkpoint in (True, False):
        cfg = load_config(DDPConfig, None, [f"data_dir={small_dataset}", f"async_checkpoint={async_checkpoint}"])
        for rank in (0, 1):
            save_epoch(model, optimizer, cfg, Resume(), carried, {"epoch": 3}, rank)
    (row0, files0, async0), (row1, files1, async1), (_, sync_files, sync0), (_, _, sync1) = calls
    upload = ray.train.CheckpointUploadMode.ASYNC
    assert files0 == ["state.pt"] and async0["checkpoint_upload_mode"] == upload
    assert async0["delete_local_checkpoint_after_upload"] and async0["checkpoint_dir_name"] == "checkpoint_000003"
    assert files1 is None and async1["checkpoint_upload_mode"] == upload and row1 == row0 == {"epoch": 3}
    assert sync_files == ["state.pt"] and "checkpoint_upload_mode" not in sync0  # Ray Train's default: in the call
    assert "checkpoint_upload_mode" not in sync1
