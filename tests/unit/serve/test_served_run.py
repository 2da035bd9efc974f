"""Serving picks the DDP run's latest COMPLETE checkpoint (issue 48): one whose files are gone or still being
written is passed over, named, for the one before; a replica refuses an incomplete copy in one line."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from rayfleet.core.errors import RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.serve.classifier import ImageClassifier
from rayfleet.serve.served_run import NothingToServe, ServedRun, find
from rayfleet.train import checkpoint
from rayfleet.train.ddp import Runtime, build_model
from rayfleet.train.ddp import state as ddp_state
from rayfleet.train.ddp.config import DDPConfig
from tests.unit.train.ray_storage_seam import RunStorage, installed

CONFIG = "precision: fp32\nsmall_convs_as_gemm: auto\n"


@pytest.fixture
def run(tmp_path):
    """A DDP run's folder with checkpoint_000001 and _000002 as the job writes them (its own writer)."""
    cfg = DDPConfig.model_construct(precision="fp32")
    model, optimizer = build_model(cfg, Runtime.resolve(cfg, torch.device("cpu")))
    job = SimpleNamespace(async_checkpoint=False, seed=0)
    with installed(RunStorage(tmp_path, run="ddp-run")) as session:
        for epoch in (1, 2):
            row = {"epoch": epoch}
            ddp_state.save_epoch(model, optimizer, job, ddp_state.Resume(), {"preemptions": 0}, row, 0, None)
    return RunDir(str(tmp_path), "ddp-run"), session


def test_serving_passes_over_an_incomplete_latest_checkpoint(run):
    run_dir, session = run
    assert find(run_dir) == ServedRun("classifier", "checkpoint_000002")
    (session.folder("checkpoint_000002") / checkpoint.STATE_FILE).unlink()
    found = find(run_dir)
    assert (found.kind, found.folder) == ("classifier", "checkpoint_000001")
    assert found.skipped == ("checkpoint_000002 is incomplete (state.pt is missing)",)
    (session.folder("checkpoint_000001") / checkpoint.STATE_FILE).unlink()
    with pytest.raises(NothingToServe, match="no complete checkpoint to serve: checkpoint_000002 is incomplete"):
        find(run_dir)


def test_a_replica_refuses_an_incomplete_copy_in_one_line(run):
    _, session = run
    state = session.folder("checkpoint_000002") / checkpoint.STATE_FILE
    whole = state.read_bytes()
    state.write_bytes(whole[: len(whole) // 2])  # the copy cut short
    with pytest.raises(RayfleetError) as refused:
        ImageClassifier(state.parent, CONFIG, "ddp-run")
    half = len(whole) // 2
    assert str(refused.value) == (
        f"refusing to serve checkpoint_000002: it is incomplete (state.pt is {half} bytes, written as {len(whole)})"
    )
    ImageClassifier(session.folder("checkpoint_000001"), CONFIG, "ddp-run")  # a whole one serves


def test_serve_up_names_the_checkpoints_it_passed_over_as_plain_text(tmp_path):
    from rayfleet.ops.serve import describe
    from rayfleet.serve.served_run import ServedRun

    served = ServedRun("classifier", "checkpoint_000001", ("checkpoint_000002 is incomplete (x.pt\x1b[2J is missing)",))
    line = describe(served, RunDir(str(tmp_path), "r"))
    assert "its latest complete checkpoint (checkpoint_000001)" in line
    assert line.endswith("; passed over: checkpoint_000002 is incomplete (x.pt?[2J is missing)") and "\x1b" not in line
