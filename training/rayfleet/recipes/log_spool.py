"""A job's output on its way to the run directory: spooled to a local file, uploaded as it grows.

The driver (rayfleet/recipes/job.py) writes every chunk of the job's output here. The chunks go to a file in
a private temporary directory, not to memory; `driver.log` in the run directory (S3 or local) is rewritten
from that file at most every RAYFLEET_LOG_FLUSH_S seconds (default 10) while there is new output, more
rarely when an upload takes long (at most a fifth of the time is spent uploading), and once more at the
end. So a driver killed with SIGKILL has already left what the job printed up to its last upload, and
memory stays flat however much the job prints (the follower, rayfleet/recipes/jobs_api.py, keeps only
the last 256 KiB in memory, for the traceback tail that a failure prints).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from rayfleet.core.run_dir import RunDir

NAME = "driver.log"
FLUSH_S = 10.0


class LogSpool:
    def __init__(self, run_dir: RunDir, every_s: float | None = None, clock=time.monotonic):
        self.run_dir = run_dir
        self.every_s = float(os.environ.get("RAYFLEET_LOG_FLUSH_S") or FLUSH_S) if every_s is None else every_s
        self.clock = clock
        self.directory = Path(tempfile.mkdtemp(prefix="rayfleet-log-"))  # 0700
        self.path = self.directory / NAME
        self.file = self.path.open("ab")
        self.size = 0
        self.uploaded_size = -1  # nothing uploaded yet, not even an empty log
        self.next_upload = self.clock() + self.every_s
        self.closed = False

    def write(self, text: str) -> None:
        data = text.encode(errors="replace")
        self.file.write(data)
        self.size += len(data)
        self.tick()

    def tick(self) -> None:
        """Upload when it is due and there is something new (called on output and every second)."""
        if not self.closed and self.size != self.uploaded_size and self.clock() >= self.next_upload:
            self.upload()

    def upload(self) -> str:
        self.file.flush()
        started = self.clock()
        url = self.run_dir.upload(NAME, self.path)
        took = self.clock() - started
        self.uploaded_size = self.size
        self.next_upload = self.clock() + max(self.every_s, 4 * took)
        return url

    def close(self) -> str:
        """The last upload; the local spool is removed (once: closing again only says where). Returns
        where driver.log is."""
        if self.closed:
            return self.run_dir.display(NAME)
        self.closed = True
        try:
            return self.upload() if self.size != self.uploaded_size else self.run_dir.display(NAME)
        finally:
            self.file.close()
            shutil.rmtree(self.directory, ignore_errors=True)
