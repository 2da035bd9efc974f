"""recipes/examples/torch-ddp's checkpoint (`checkpoint/state.pt` under the run directory): a rank killed while
saving leaves the previous checkpoint whole, so the attempt launched again resumes from it (issue 48: every
resume reads a complete checkpoint). The example end to end: tests/integration/test_recipe_launchers.py."""

from __future__ import annotations

import importlib.util
import io
import signal
from pathlib import Path

import pytest
import torch
from pyarrow import fs

EXAMPLE = Path(__file__).parents[3] / "recipes" / "examples" / "torch-ddp" / "train.py"


@pytest.fixture
def example():
    spec = importlib.util.spec_from_file_location("torch_ddp_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    before = signal.getsignal(signal.SIGUSR1)
    spec.loader.exec_module(module)
    yield module
    signal.signal(signal.SIGUSR1, before)


class Killed(BaseException):
    """The rank's process ending in the middle of a write (SIGKILL in a real run)."""


class DiesMidWrite(fs.LocalFileSystem):
    """The run directory's filesystem, on which the writing rank dies after half of the bytes."""

    def open_output_stream(self, path, *args, **kwargs):
        real = super().open_output_stream(path, *args, **kwargs)

        class Half:
            def __enter__(self):
                return self

            def write(self, data):
                real.write(data[: len(data) // 2])
                real.close()
                raise Killed()

            def __exit__(self, *exc):
                return False

        return Half()


def test_a_rank_killed_while_saving_leaves_the_previous_checkpoint_to_resume_from(example, tmp_path, monkeypatch):
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    path = f"{tmp_path}/checkpoint/state.pt"
    example.save(path, model, optimizer, 5)
    monkeypatch.setattr(example, "storage", lambda where: (DiesMidWrite(), where))
    with pytest.raises(Killed):
        example.save(path, model, optimizer, 10)
    monkeypatch.undo()
    saved = example.read(path)  # what the next attempt's rank reads, then loads as the script does
    assert torch.load(io.BytesIO(saved), weights_only=True)["step"] == 5
