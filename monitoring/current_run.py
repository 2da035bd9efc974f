"""Which run is using this node's GPUs, read from the current-run files the training workers write.

The file contract (its writer is rayfleet/train/current_run.py; neither side imports the other):

  * the directory is $RAYFLEET_CURRENT_RUN_DIR; on ECS the worker task sets /run/rayfleet, a task volume
    mounted read-write in the ray-worker container and read-only in gpu-metrics;
  * each Ray Train worker process on the node writes one file `run.<pid>` holding the run's name (one line,
    UTF-8): written under a temporary name, locked with flock(LOCK_EX), then renamed into place; it keeps the
    lock while it trains and removes the file when it ends;
  * a file whose lock can be taken belongs to a process that is gone (the kernel drops a dead process's
    locks, SIGKILL included), so it names no run. Temporary and other names are ignored.

The sidecar reads the directory at every sample, so its RunName rollup follows the runs as they come and go.
"""

from __future__ import annotations

import fcntl
import os
import re
from pathlib import Path

ENV = "RAYFLEET_CURRENT_RUN_DIR"
NAME = re.compile(r"run\.\d+")


def directory_from(env: dict) -> str | None:
    return env.get(ENV) or None


def _live_name(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # removed between the listing and the open: that run ended
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # its writer holds the lock: a live run
            return os.read(fd, 4096).decode(errors="replace").strip() or None
        fcntl.flock(fd, fcntl.LOCK_UN)  # nobody holds it: its writer is gone
        return None
    finally:
        os.close(fd)


def current_runs(directory: str | Path | None) -> list[str]:
    """The runs whose training workers are alive on this node, sorted; [] without the directory."""
    if not directory:
        return []
    try:
        entries = [e for e in os.scandir(directory) if NAME.fullmatch(e.name)]
    except OSError:
        return []
    return sorted({name for e in entries if (name := _live_name(Path(e.path)))})
