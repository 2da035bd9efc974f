"""Marks the node a training worker runs on with the run's name, for the GPU-metrics sidecar beside it.

    with current_run.marked(run_name):      # around each Ray Train worker's loop (rayfleet/train/fit.py)
        train_loop(config)

The file contract (its reader is monitoring/current_run.py; neither side imports the other):

  * the directory is $RAYFLEET_CURRENT_RUN_DIR; on ECS the worker task sets /run/rayfleet, a task volume
    mounted read-write in the ray-worker container and read-only in gpu-metrics. Unset, or not a directory
    (a laptop, the trainer), nothing is written;
  * each worker process writes `run.<pid>` holding the run's name: under a temporary name, locked with
    flock(LOCK_EX), then renamed into place, so a reader never sees an unlocked live file; the lock is held
    while the worker trains, and the file removed when it ends;
  * a process killed outright (SIGKILL, as Ray kills actors) leaves its file but not its lock: the reader
    ignores it, and the next worker to start on the node removes it.

A failure to write never stops training: the sidecar's RunName rollup is lost, nothing else.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ENV = "RAYFLEET_CURRENT_RUN_DIR"
NAME = re.compile(r"run\.\d+")


def _clear_dead(directory: Path) -> None:
    """Remove the files of writers that are gone (their lock is free)."""
    for entry in directory.iterdir():
        if not NAME.fullmatch(entry.name) or entry.name == f"run.{os.getpid()}":
            continue
        try:
            fd = os.open(entry, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            entry.unlink(missing_ok=True)
        except OSError:  # locked: a live worker
            pass
        finally:
            os.close(fd)


@contextlib.contextmanager
def marked(run_name: str, directory: str | Path | None = None) -> Iterator[Path | None]:
    """Mark this node with `run_name` while the block runs; yields the file, or None when nothing was written."""
    directory = directory or os.environ.get(ENV)
    if not directory or not Path(directory).is_dir():
        yield None
        return
    directory = Path(directory)
    path, tmp = directory / f"run.{os.getpid()}", directory / f".run.{os.getpid()}.tmp"
    fd = None
    try:
        _clear_dead(directory)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, run_name.encode() + b"\n")
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.replace(tmp, path)
    except OSError as exc:
        print(f"rayfleet: the GPU sidecar will not see run {run_name} ({directory}: {exc})", file=sys.stderr)
        if fd is not None:
            os.close(fd)
            fd = None
        with contextlib.suppress(OSError):
            tmp.unlink()
    try:
        yield path if fd is not None else None
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)
