"""Background checkpoints on the real local cluster (tests/integration/jobs/upload_kill_job.py: the DDP job's
`checkpoint.Uploads` path in a loop of its own, so the test can hold an upload open).

Proves what the unit tests cannot: with a checkpoint's write and upload in flight in Ray Train's upload
thread, the loop goes on stepping, up to the next checkpoint, which waits for it (one in flight); rank 0
killed before that upload ends, Ray Train restarts the group from the last checkpoint it registered (its
checkpoint_manager_snapshot.json names it), the one in flight never registered, and the run finishes. (A
checkpoint whose report the controller had not yet collected when the worker died is not registered either:
the restart then goes back one more.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def test_a_kill_during_an_upload_resumes_from_the_checkpoint_before_it(cluster_env, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    command = [sys.executable, str(REPO / "tests/integration/jobs/upload_kill_job.py"), str(marks)]
    command += [f"storage={tmp_path}", "run_name=torn", "max_failures=1", "keep_checkpoints=10"]
    with open(tmp_path / "out", "w") as out:
        # Ray folds lines that differ only in numbers; the driver (a script) imports this checkout first
        env = {**cluster_env, "RAY_DEDUP_LOGS": "0", "PYTHONPATH": str(REPO)}
        job = subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while not (marks / "uploading").exists():
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()[-3000:]
            time.sleep(0.2)
        at_upload = int((marks / "step").read_text())
        while int((marks / "step").read_text()) < 12:  # the loop goes on while step 8's upload is in flight
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()[-3000:]
            time.sleep(0.2)
        rank0 = (marks / "uploading").read_text()  # rank 0's worker: the loop's process, and the upload's
        while f"{rank0} wait 12" not in lines(marks / "events"):  # step 12's checkpoint waits for step 8's upload
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()[-3000:]
            time.sleep(0.2)
        registered = tmp_path / "torn" / "checkpoint_manager_snapshot.json"  # Ray Train's own record
        while "checkpoint_step_0000004" not in (registered.read_text() if registered.exists() else ""):
            assert job.poll() is None and time.monotonic() < deadline, (tmp_path / "out").read_text()[-3000:]
            time.sleep(0.2)  # the one before is registered: the controller has collected its reports
        os.kill(int((marks / "uploading").read_text()), signal.SIGKILL)  # rank 0's worker, mid-upload
        job.wait(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
    out = (tmp_path / "out").read_text()
    assert job.returncode == 0, out[-5000:]
    assert 8 <= at_upload < 12  # steps 9-12 ran while step 8's checkpoint was uploading
    # ... and the loop stopped at step 12's wait: one in flight. Had the wait not held it, "waited 12" would
    # follow "wait 12" at once (the same thread, nothing between), before the test saw either and killed it.
    first = [line.split(" ", 1)[1] for line in lines(marks / "events") if line.split(" ", 1)[0] == rank0]
    every = [(f"step {s}", *((f"wait {s}", f"waited {s}") if s % 4 == 0 else ())) for s in range(1, 13)]
    assert first == [line for lines_of_step in every for line in lines_of_step][:-1], first  # ends at "wait 12"
    assert "rank 0 starts at step 0" in out and "rank 0 starts at step 4" in out  # not 8: it never registered
    saved = sorted(p.name for p in (tmp_path / "torn").glob("checkpoint_step_*"))
    assert saved == [f"checkpoint_step_{s:07d}" for s in (4, 8, 12, 16, 20)]  # 8 again, written whole this time


def lines(path) -> list[str]:
    """The whole lines of a file another process appends to (a line still being written is left out)."""
    text = path.read_text() if path.exists() else ""
    return text.split("\n")[:-1]
