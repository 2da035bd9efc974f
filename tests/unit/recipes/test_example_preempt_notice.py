"""recipes/examples/hf-trainer's SaveOnPreemptNotice, the callback the README points Trainer users to: it has
the Trainer save and stop at the step the notice (file or SIGUSR1) is heard, once. The file and signal
themselves: tests/unit/node/test_preempt_notice.py; the torch-ddp example end to end on a drained node:
tests/integration/test_preemption_on_local_cluster.py."""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

EXAMPLE = Path(__file__).parents[3] / "recipes" / "examples" / "hf-trainer" / "train.py"


@pytest.fixture
def example(monkeypatch, tmp_path):
    monkeypatch.setenv("RAYFLEET_PREEMPT_FILE", str(tmp_path / "preempt.json"))
    spec = importlib.util.spec_from_file_location("hf_trainer_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = signal.getsignal(signal.SIGUSR1)
    yield module
    signal.signal(signal.SIGUSR1, before)


def step_end(callback, step: int):
    from transformers.trainer_callback import TrainerControl

    state = SimpleNamespace(global_step=step, is_world_process_zero=True)
    return callback.on_step_end(SimpleNamespace(world_size=1), state, TrainerControl())


@pytest.mark.parametrize("how", ["file", "signal"])
def test_the_trainer_saves_and_stops_at_the_step_the_notice_is_heard(example, how, capsys):
    callback = example.SaveOnPreemptNotice()
    control = step_end(callback, 3)
    assert not control.should_save and not control.should_training_stop and callback.heard_at is None
    if how == "file":
        Path(os.environ["RAYFLEET_PREEMPT_FILE"]).write_text('{"deadline_s": 90}')
    else:
        signal.raise_signal(signal.SIGUSR1)  # caught: the process goes on
    control = step_end(callback, 4)
    assert control.should_save and control.should_training_stop and callback.heard_at == 4
    assert "preemption notice: saving at step 4 and stopping" in capsys.readouterr().out
    assert not step_end(callback, 5).should_save  # once: the save it asked for is the notice's


def test_a_checkpoint_copy_cut_short_is_not_resumed_from(example, tmp_path, capsys):
    """On s3:// the Trainer's checkpoint is copied into the run directory after the notice: a node that goes
    while copying leaves a folder without the example's marker; the next attempt resumes from the one before
    (issue 48: every resume reads a complete checkpoint). A local folder stands in for the bucket here."""
    trainer = tmp_path / "node" / "trainer"
    for step in (3, 6):
        (trainer / f"checkpoint-{step}").mkdir(parents=True)
        (trainer / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
        bucket = tmp_path / "run" / "trainer" / f"checkpoint-{step}"
        bucket.mkdir(parents=True)  # S3 has no folders to make; a local stand-in needs them
        example.save_copy(str(trainer / f"checkpoint-{step}"), str(bucket))
    (tmp_path / "run" / "trainer" / "checkpoint-6" / example.COPIED).unlink()  # the copy of step 6 cut short
    (tmp_path / "next").mkdir()
    last = example.restore(str(tmp_path / "run" / "trainer"), str(tmp_path / "next"))
    assert last == str(tmp_path / "next" / "checkpoint-3")
    assert capsys.readouterr().out.splitlines() == [
        f"checkpoint-6 in {tmp_path / 'run' / 'trainer'} incomplete (copy cut short): not resumed from"
    ]
