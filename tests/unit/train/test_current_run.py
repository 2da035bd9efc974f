"""The training side of the current-run file contract (rayfleet/train/current_run.py), read back through the
sidecar's reader (monitoring/current_run.py): a worker marks the node while it trains, unmarks it when it
ends, and a worker killed outright (SIGKILL: no finally runs) stops counting at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from monitoring.current_run import current_runs
from rayfleet.train import current_run
from tests.integration.helpers import REPO


def test_marked_while_training_and_unmarked_after(tmp_path):
    with current_run.marked("ddp-1", tmp_path) as path:
        assert path is not None and path.name == f"run.{os.getpid()}"
        assert current_runs(tmp_path) == ["ddp-1"]
    assert current_runs(tmp_path) == [] and list(tmp_path.iterdir()) == []


def test_without_a_directory_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv(current_run.ENV, raising=False)
    with current_run.marked("ddp-1") as path:
        assert path is None
    monkeypatch.setenv(current_run.ENV, str(tmp_path / "not-mounted"))
    with current_run.marked("ddp-1") as path:  # no volume (a laptop): training goes on, unmarked
        assert path is None


def test_a_killed_worker_stops_counting_and_the_next_clears_its_file(tmp_path):
    code = (
        "import sys, time; from rayfleet.train import current_run\n"
        "with current_run.marked('killed-run', sys.argv[1]):\n"
        "    print('marked', flush=True); time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "marked"
    assert current_runs(tmp_path) == ["killed-run"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert (tmp_path / f"run.{proc.pid}").exists()  # left behind, but unlocked
    assert current_runs(tmp_path) == []
    with current_run.marked("next-run", tmp_path):
        assert current_runs(tmp_path) == ["next-run"]
        assert not (tmp_path / f"run.{proc.pid}").exists()  # a new writer removes dead writers' files
    time.sleep(0)
