"""DeepSpeed's checkpoints load weights-only (issue 27, finding 2): a resume restores exactly what the job saved,
and a tampered file is refused before anything in it runs. DeepSpeed's own load unpickled everything."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache

import pytest

TAMPERED = ("model_states", "optim_states", "dotted")


@pytest.fixture(scope="module")
def resume(tmp_path_factory):
    """The save-and-resume process (tests/unit/train/deepspeed_resume.py) once per precision."""

    @cache
    def run(precision: str, *cases: str) -> tuple[dict, object]:
        root = tmp_path_factory.mktemp(f"deepspeed-{precision}")
        done = subprocess.run(
            [sys.executable, "-m", "tests.unit.train.deepspeed_resume", str(root), precision, *cases],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-5000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        return json.loads(line.removeprefix("RESULT ")), root

    return run


@pytest.mark.parametrize("precision", ["fp32", "bf16"])  # what the jobs write on a CPU and on a GPU
def test_a_checkpoint_the_job_saved_resumes_with_equal_weights_optimizer_and_step(resume, precision):
    cases = ("clean", "incomplete", *TAMPERED) if precision == "fp32" else ("clean",)
    results, _ = resume(precision, *cases)
    clean = results["clean"]
    assert "error" not in clean, clean.get("traceback")
    assert clean["equal"] == {"params": True, "fp32": True, "adam": True}
    assert clean["fresh_equal"] == {"params": False, "fp32": False, "adam": False}  # so the load did the work
    assert clean["steps"] == [1, 1]
    expected = {"attempt": 0, "seed": 0, "strategy": "deepspeed", "step": 1, "resumed_from": "resume-clean"}
    assert clean["train_state"] == expected
    # Every file of the resume went through the weights-only unpickler, DeepSpeed's own loads included.
    assert clean["weights_only"] and all(w is True for w in clean["weights_only"]), clean["weights_only"]


@pytest.mark.parametrize("case", TAMPERED)
def test_a_tampered_checkpoint_file_is_refused_and_its_payload_never_runs(resume, case):
    """model_states / optim_states: DeepSpeed's file, whole, plus an object whose unpickling runs `touch`;
    dotted: os.system reached by a dotted name from the module of an allow-listed DeepSpeed class."""
    results, root = resume("fp32", "clean", "incomplete", *TAMPERED)
    result = results[case]
    assert not (root / f"pwned-{case}").exists(), "the payload ran"
    assert "error" in result, f"the tampered {case} checkpoint loaded"
    assert "holds more than DeepSpeed checkpoint data; refused, nothing in it ran" in result["error"]
    assert "Weights only load failed" in result["traceback"]


def test_deepspeed_resumes_from_the_newest_complete_checkpoint_when_a_partition_is_missing(resume):
    """The latest kept checkpoint lost rank 0's optimizer partition: the strategy's load (the job's real resume
    through Ray's worker-API seam) restores the one before and says so in one line."""
    results, _ = resume("fp32", "clean", "incomplete", *TAMPERED)
    result = results["incomplete"]
    assert "error" not in result, result
    assert result["train_state"]["resumed_from"] == "checkpoint_step_0000001"
    [line] = result["printed"].splitlines()
    assert line.startswith("rayfleet: checkpoint_step_0000002 is incomplete (state/")
    assert line.endswith("is missing): resuming from checkpoint_step_0000001 instead")
