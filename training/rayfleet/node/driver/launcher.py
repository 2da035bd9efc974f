"""One launcher process (torchrun, accelerate launch) on one Ray worker node, as a Ray actor.

rayfleet/node/driver/multinode.py (the job's driver) places one of these per worker node of a launcher recipe
and tells each what to run. The actor runs where Ray put it, in the job's runtime_env: its working
directory is the unpacked code and its environment has the job's RAYFLEET_* variables. It starts the
launcher in a session of its own, keeps its output for the driver to collect (`read`), and stops the whole
session on `stop`. The launcher gets SIGTERM when the actor's process dies (prctl PDEATHSIG), so a driver
or actor killed outright leaves no training processes behind: torchrun stops its own workers on SIGTERM.
When a node of the run is about to be preempted, `notice` tells this node's ranks
(rayfleet/node/driver/preempt_notice.py):
the file named by RAYFLEET_PREEMPT_FILE, private to this launcher, and SIGUSR1 to the ranks that catch it.

Only the standard library, psutil and Ray: this runs in the worker image (rayfleet/node/ and, for secrets,
rayfleet/recipes/).
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from rayfleet.node.driver import preempt_notice

PR_SET_PDEATHSIG = 1
TAIL_LINES = 200
TRACEBACK = "Traceback (most recent call last)"
REFS_VAR = "RAYFLEET_SECRET_REFS"  # rayfleet/recipes/secrets.py: the recipe's secret references, never values


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the process that started it (the actor) dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class NodeLauncher:
    """Create with `ray.remote(NodeLauncher).options(max_concurrency=4, ...)`: `wait` blocks while the driver
    keeps calling `read` and, on a failure elsewhere, `stop`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.new: collections.deque[str] = collections.deque()
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self.lock = threading.Lock()
        self.reader: threading.Thread | None = None
        self.traceback_at: float | None = None
        # Where a preemption notice will appear for this launcher's ranks: absent until there is one.
        self.notice_dir = tempfile.mkdtemp(prefix="rayfleet-notice-")
        self.notice_file = os.path.join(self.notice_dir, "preempt.json")

    def where(self) -> dict:
        import ray

        return {
            "ip": ray.util.get_node_ip_address(),
            "node_id": ray.get_runtime_context().get_node_id(),
            "host": socket.gethostname(),
            "cwd": os.getcwd(),
        }

    def free_port(self) -> int:
        """A port free on this node now, for the rendezvous (rank 0 only). Another process could take it
        before the launcher binds it; the launcher then fails at once and the attempt fails loudly."""
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def start(self, argv: list[str], env: dict[str, str]) -> int:
        """Run `python <argv>` (a launcher module and its arguments) with `env` added; its pid. A recipe with
        secrets: the launcher starts through rayfleet.recipes.job_entry, which resolves the references with
        this node's credentials, as the driver's own entrypoint does, so Ray never holds a value."""
        command = [sys.executable, *argv]
        if os.environ.get(REFS_VAR):
            command = [sys.executable, "-m", "rayfleet.recipes.job_entry", shlex.join(command)]
        self.proc = subprocess.Popen(
            command,
            env={**os.environ, **env, preempt_notice.FILE_VAR: self.notice_file},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()
        return self.proc.pid

    def _pump(self) -> None:
        for line in self.proc.stdout:
            if self.traceback_at is None and TRACEBACK in line:
                self.traceback_at = time.time()
            with self.lock:
                self.new.append(line.rstrip("\n"))
                self.tail.append(line.rstrip("\n"))

    def wait(self) -> tuple[int, float]:
        """The launcher's exit code and when this node failed (wall clock, for the driver to find the node
        that failed first): when its first traceback was printed, else when the launcher exited. A rank
        that raises prints its traceback before its sockets close; its peers' errors come after that,
        while the launchers' exits are ordered only to their monitor interval."""
        code = self.proc.wait()
        ended_at = time.time()
        self.reader.join(timeout=10)  # the last lines are in `new` before the exit code is known
        return code, self.traceback_at or ended_at

    def read(self) -> list[str]:
        with self.lock:
            lines = list(self.new)
            self.new.clear()
        return lines

    def last_lines(self) -> list[str]:
        with self.lock:
            return list(self.tail)

    def notice(self, deadline: float, node_rank: int, ray_node_id: str) -> dict:
        """Tell this node's ranks that node `node_rank` goes at `deadline` (Unix time): the notice file, then
        the signal to the ranks that catch it. What was written, with the number of ranks signalled."""
        written = preempt_notice.write(self.notice_file, deadline, node_rank, ray_node_id)
        signalled = preempt_notice.signal_ranks(self.proc.pid) if self.proc and self.proc.poll() is None else []
        return {**written, "signalled": len(signalled)}

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM to the launcher's whole session (torchrun passes it to its workers), SIGKILL after
        `grace_s`. Returns the exit code, None if nothing was started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        self._signal(signal.SIGKILL)  # anything of the session still left, such as a worker torchrun orphaned
        shutil.rmtree(self.notice_dir, ignore_errors=True)
        return self.proc.returncode

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
