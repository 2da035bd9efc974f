"""Who follows a run's job: the submitter named in run.json (host, pid and the process's start time), so that
a reader can tell when nobody follows it any more (the listing's LOST, `logs -f`'s end, a stale name claim)."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime
from pathlib import Path


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22): with the pid, it
    names one process, not whichever later reuses the pid. None where there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def submitter() -> dict:
    """Who follows the run: recorded in run.json so that a reader can tell when nobody does any more."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": _process_start(os.getpid())}


def submitter_gone(record: dict) -> bool:
    """True when run.json names a submitter on this host whose process no longer exists; False when it
    lives or when it runs elsewhere (on ECS the trainer task's state decides: rayfleet/ops/runs/__init__.py)."""
    who = record.get("submitter") or {}
    if who.get("host") != socket.gethostname() or not who.get("pid"):
        return False
    return _process_start(int(who["pid"])) != who.get("pid_start")
