"""Issue 48's head-kill resume bug: after the rehearsal's head was killed mid-run, both ranks of the resubmitted
DDP run failed with `FileNotFoundError: /tmp/checkpoint_tmp_<hex>/state.pt`. Two causes reach that line, both
reproduced here through the job's own reader (`ddp_state.resume`) on a NON-local filesystem, as S3 is:

* a checkpoint whose files are gone (S3 has no folders: a checkpoint whose objects were deleted downloads as
  an empty folder), read without looking;
* two ranks on one node sharing Ray's temporary copy (`Checkpoint.as_directory()`: the same Checkpoint, so the
  same `/tmp/checkpoint_tmp_<uuid>`), one deleting it while the other reads it (Ray's check that no one else
  reads it and its delete are not one step).

No Ray cluster: Ray's own worker-API seam (tests/unit/train/ray_storage_seam.py) hands the reader the
Checkpoint objects a controller would."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from rayfleet.core.errors import RayfleetError
from rayfleet.train import checkpoint
from rayfleet.train.ddp import state as ddp_state
from tests.unit.train.ray_storage_seam import RunStorage, installed


def _model():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _save(session: RunStorage, epoch: int) -> Path:
    """Rank 0's epoch checkpoint through the DDP job's own writer, then registered as Ray Train would."""
    model, optimizer = _model()
    cfg = SimpleNamespace(async_checkpoint=False, seed=0)
    carried = {"preemptions": 0, "steps_redone": 0}
    ddp_state.save_epoch(model, optimizer, cfg, ddp_state.Resume(), carried, {"epoch": epoch}, 0, None)
    name = checkpoint.checkpoint_name(epoch)
    session.register(name)
    return session.folder(name)


def test_a_checkpoint_whose_files_are_gone_is_refused_in_one_line_not_read(tmp_path, capsys):
    """The observed failure, deterministically: the only kept checkpoint's files are gone (its folder empty, as
    S3 downloads a prefix whose objects were deleted). The resume must say so in one line, naming the
    checkpoint, never fail inside the read with Ray's temporary path, and never start from scratch."""
    with installed(RunStorage(tmp_path / "storage", world=2)) as session:
        for file in _save(session, 2).iterdir():
            file.unlink()
        model, optimizer = _model()
        with pytest.raises(RayfleetError) as failed:
            ddp_state.resume(model, optimizer, "run", 0)
    message = str(failed.value)
    assert "\n" not in message and "checkpoint_000002" in message and "no complete checkpoint" in message
    assert "checkpoint_tmp_" not in message


def test_a_rank_reads_its_own_copy_while_another_rank_of_its_node_finishes(tmp_path):
    """Two ranks of one node resume from the same Checkpoint object (Ray's controller hands every worker the
    same one). Rank A finishes its read and, inside Ray's clean-up, has checked that no other reader holds the
    temporary folder; rank B then downloads into that folder and reads it only after A is done. B must still
    read the whole checkpoint; and no shared temporary folder is left behind."""
    with installed(RunStorage(tmp_path / "storage", world=2)) as session:
        _save(session, 3)
    shared = session.kept[-1]
    from ray.train._checkpoint import Checkpoint

    assert isinstance(shared, Checkpoint)
    context = multiprocessing.get_context("spawn")
    events = {name: context.Event() for name in ("a_checked", "b_reading", "a_done")}
    results = context.Queue()
    from tests.unit.train import resume_race

    a = context.Process(target=resume_race.rank, args=("A", str(tmp_path / "storage"), [shared], events, results))
    a.start()
    resume_race.rank("B", str(tmp_path / "storage"), [shared], events, results)
    outcomes = dict(results.get(timeout=300) for _ in "AB")
    a.join(timeout=60)
    assert outcomes == {"A": "resumed at epoch 4", "B": "resumed at epoch 4"}, outcomes
    assert not Path(shared._get_temporary_checkpoint_dir()).exists()


def test_ddp_resumes_from_the_newest_complete_checkpoint_and_says_so_once(tmp_path, capsys):
    """The latest kept checkpoint lost its state (its seal lists state.pt): every rank resumes from the one
    before, the run record's checkpoint name says which, and rank 0 alone prints one line naming both and why."""
    with installed(RunStorage(tmp_path / "storage", world=2)) as session:
        _save(session, 1)
        (_save(session, 2) / checkpoint.STATE_FILE).unlink()
        model, optimizer = _model()
        found = ddp_state.resume(model, optimizer, "run", 0)
    assert (found.start_epoch, found.attempt, found.resumed_from) == (2, 1, "checkpoint_000001")
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "rayfleet: checkpoint_000002 is incomplete (state.pt is missing): resuming from checkpoint_000001 instead",
        "resuming run from the checkpoint of epoch 1 (attempt 1)",
    ]
    with installed(RunStorage(tmp_path / "storage", rank=1, world=2, kept=session.kept)):
        assert ddp_state.resume(*_model(), "run", 1).resumed_from == "checkpoint_000001"
    assert capsys.readouterr().out == ""  # rank 1 says nothing


def test_a_checkpoint_from_before_seals_is_read_with_one_note(tmp_path, capsys):
    """A checkpoint written before this change has no seal and cannot have one: read as is, noted once."""
    with installed(RunStorage(tmp_path / "storage", world=2)) as session:
        (_save(session, 1) / "rayfleet-complete.0.json").unlink()
        found = ddp_state.resume(*_model(), "run", 0)
    assert found.resumed_from == "checkpoint_000001"
    note = "rayfleet: checkpoint_000001: it has no completeness seal (written before rayfleet sealed checkpoints)"
    assert capsys.readouterr().out.splitlines()[0] == f"{note}; read as is"


def test_the_run_record_and_the_epoch_rows_name_the_checkpoint_an_attempt_resumed_from(tmp_path):
    """What `rayfleet runs --json` and run.json read: an event from rank 0 (the driver owns run.json), and
    every epoch row of the attempt; nothing on a fresh start."""
    from rayfleet.core.run_dir import RunDir
    from rayfleet.train.ddp import report as ddp_report

    run_dir = RunDir(str(tmp_path), "run")
    run_dir.update(state="RUNNING")
    ddp_report.record_resume(run_dir, ddp_state.Resume())
    assert "resumed_from" not in run_dir.record()
    found = ddp_state.Resume(start_epoch=3, attempt=2, resumed_from="checkpoint_000002")
    ddp_report.record_resume(run_dir, found)
    assert run_dir.record()["resumed_from"] == {"attempt": 2, "checkpoint": "checkpoint_000002"}
    rt = SimpleNamespace(device=torch.device("cpu"))
    row = ddp_report.epoch_row(3, [1.0, 10, 1.0, 5, 10], None, 1.0, 1.0, 1, rt, found, {})
    assert (row["attempt"], row["resumed_from"]) == (2, "checkpoint_000002")
