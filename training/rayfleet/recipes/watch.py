"""The recipe's command as a watched child of the job's process, when the run notifies (notify.py).

Its output passes through unchanged (Ray's job log records it as before), and the watcher
  * says the run started, and at the end succeeded, or failed with the last lines of output;
  * says it hung, with the evidence, when the job's hang watchdog prints its `hang:` line;
  * says it resumed when the job prints a resume line (the jobs print `... (attempt N)` when they continue
    from a checkpoint after a worker-group restart or a resubmission);
  * says it stalled when nothing was printed for `stall_after_s` while it runs (the jobs print a progress
    line at least every `progress_every_s`, so silence is a hung collective, a dead data source, or a
    recipe stuck in its own code), once per silence, and that it goes on when output comes back.
SIGTERM and SIGINT are passed to the command: stopping the job stops it as before.
"""

from __future__ import annotations

import collections
import re
import signal
import subprocess
import sys
import threading
import time

from rayfleet.recipes.notify import Event, Notifier

RESUMED = re.compile(r"\bresuming\b.*\(attempt (\d+)\)")
HUNG = re.compile(r"^hang: (.*)")  # the hang watchdog's line with its evidence (rayfleet/train/control/hang_watch.py)
TAIL_LINES = 30


class Watch:
    def __init__(self, notifier: Notifier, run: str, stall_after_s: float, clock=time.monotonic):
        self.notifier, self.run, self.stall_after_s, self.clock = notifier, run, stall_after_s, clock
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.last_output = clock()
        self.stalled = False
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            self.tail.append(text.rstrip("\n"))
            self.last_output = self.clock()
            was_stalled, self.stalled = self.stalled, False
        if was_stalled:
            self.notifier.send(Event(self.run, "is progressing again", text.strip()[:300]))
        match = RESUMED.search(text)
        if match:
            self.notifier.send(Event(self.run, "resumed", f"attempt {match.group(1)}: {text.strip()[:300]}"))
        hung = HUNG.search(text.strip())
        if hung:
            self.notifier.send(Event(self.run, "hung", hung.group(1)[:600]))

    def check_stall(self) -> None:
        with self.lock:
            silent = self.clock() - self.last_output
            if self.stalled or not self.stall_after_s or silent < self.stall_after_s:
                return
            self.stalled = True
            last = self.tail[-1] if self.tail else "(no output yet)"
        self.notifier.send(Event(self.run, "stalled", f"no output for {silent:.0f} s; last line: {last}"))

    def ended(self, code: int) -> None:
        if code == 0:
            self.notifier.send(Event(self.run, "succeeded"))
            return
        tail = "\n".join(self.tail)
        self.notifier.send(Event(self.run, "failed", f"exit code {code}; the last lines:\n{tail}"))


def forward(pid: int, signum: int) -> None:
    """To the shell and everything it started: `sh -c 'a; b'` does not pass a signal on to its child."""
    import psutil

    try:
        parent = psutil.Process(pid)
        for process in [*parent.children(recursive=True), parent]:
            process.send_signal(signum)
    except psutil.NoSuchProcess:
        pass


def run_watched(command: str, env: dict, watch: Watch) -> int:
    watch.notifier.send(Event(watch.run, "started"))
    # Unbuffered: a Python child that block-buffers its pipe would look silent (stalled) and scramble the tail.
    env = {"PYTHONUNBUFFERED": "1", **env}
    child = subprocess.Popen(
        ["/bin/sh", "-c", command], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0
    )
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, _frame: forward(child.pid, s))
    done = threading.Event()
    poll = min(max(watch.stall_after_s / 4, 0.2), 30) if watch.stall_after_s else None

    def stall_loop() -> None:
        while not done.wait(poll):
            watch.check_stall()

    if poll:
        threading.Thread(target=stall_loop, daemon=True).start()
    assert child.stdout is not None
    # Bytes, decoded with replacement: a job may print anything, and one byte that is not UTF-8 must not end
    # the watch (the run marked failed, the job killed by EPIPE, no notification sent).
    for raw in iter(child.stdout.readline, b""):
        text = raw.decode("utf-8", errors="replace")
        sys.stdout.write(text)
        sys.stdout.flush()
        watch.line(text)
    code = child.wait()
    done.set()
    watch.ended(code)
    return code
