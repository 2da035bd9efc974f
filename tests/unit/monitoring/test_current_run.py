"""The sidecar's side of the current-run file contract (monitoring/current_run.py): only files whose writer
still holds its lock name a run; a dead writer's file, temporary files and other names are ignored."""

from __future__ import annotations

import fcntl
import os

from monitoring.current_run import current_runs, directory_from


def _locked(path, name: str) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, name.encode() + b"\n")
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_only_locked_files_name_runs(tmp_path):
    live = [_locked(tmp_path / "run.101", "ddp-1"), _locked(tmp_path / "run.102", "ddp-1")]
    (tmp_path / "run.99").write_text("killed-run\n")  # its writer died: the kernel dropped the lock
    (tmp_path / ".run.103.tmp").write_text("half-written\n")
    (tmp_path / "notes").write_text("other\n")
    assert current_runs(tmp_path) == ["ddp-1"]
    other = _locked(tmp_path / "run.104", "fsdp-2")
    assert current_runs(tmp_path) == ["ddp-1", "fsdp-2"]
    for fd in [*live, other]:
        os.close(fd)  # what a process's exit does
    assert current_runs(tmp_path) == []


def test_no_directory_means_no_run(tmp_path):
    assert current_runs(tmp_path / "absent") == []
    assert current_runs(None) == []
    assert directory_from({"RAYFLEET_CURRENT_RUN_DIR": "/run/rayfleet"}) == "/run/rayfleet"
    assert directory_from({}) is None
