"""A container's output into its CloudWatch Logs stream, as ECS's awslogs driver ships it: `podman logs -f`,
stdout and stderr both (a driver's own error line is on its stderr).

podman 4.3's follower sometimes ends while its container runs on ("Waiting for container to exit:
unexpected end of JSON input", seen under load); the shipper then follows again from the log's start and
skips the lines it already sent, so the stream gets every line once.
"""

from __future__ import annotations

import contextlib
import queue
import re
import subprocess
import sys
import threading
import time

from tools.rehearsal import podman

# What `podman logs` itself writes to its stderr, beside the container's own stderr lines.
PODMAN_SAYS = re.compile(r"(Error: |Waiting for container to exit|time=\"[^\"]*\" level=)")


class LogShipper(threading.Thread):
    """`podman logs -f` of one container into its CloudWatch Logs stream (and a local file, if given)."""

    def __init__(self, logs, podman_name: str, group: str, stream: str, local_file, running=None):
        super().__init__(name=f"logs-{podman_name}", daemon=True)
        self.logs, self.podman_name, self.group, self.stream = logs, podman_name, group, stream
        self.local_file = local_file
        self.running = running or (lambda: container_running(podman_name))
        self.proc: subprocess.Popen | None = None
        self.closing = False
        self.restarts = 0

    def run(self) -> None:
        with contextlib.suppress(Exception):
            self.logs.create_log_stream(logGroupName=self.group, logStreamName=self.stream)
        sent = {"out": 0, "err": 0}
        while True:
            sent, problem = self._follow(skip=sent)
            if self.closing or not self.running():
                return
            self.restarts += 1
            print(f"[rehearsal] following {self.podman_name}'s output again ({problem})", file=sys.stderr, flush=True)
            time.sleep(1)

    def _follow(self, skip: dict[str, int]) -> tuple[dict[str, int], str]:
        """One `podman logs -f` until it ends; the first `skip` lines of each stream went out before. (lines
        seen per stream, podman's last error line)."""
        self.proc = proc = subprocess.Popen(
            ["podman", "logs", "-f", self.podman_name],
            env=podman.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        lines: queue.Queue[tuple[str, str | None]] = queue.Queue()
        for tag, stream in (("out", proc.stdout), ("err", proc.stderr)):
            threading.Thread(target=_read_lines, args=(stream, tag, lines), daemon=True).start()
        seen, said = self._ship(lines, skip)
        proc.wait()
        return seen, said[-1] if said else f"podman logs exited {proc.returncode}"

    def _ship(self, lines: queue.Queue, skip: dict[str, int]) -> tuple[dict[str, int], list[str]]:
        """The container's stdout and stderr, both, as awslogs ships them (podman logs writes the container's
        stderr to its own stderr); podman's own complaints there are kept apart, not shipped."""
        batch: list[dict] = []
        seen, said, open_streams = {"out": 0, "err": 0}, [], 2
        while open_streams:
            # A quiet container's last lines go out within half a second, not with its next line.
            try:
                tag, line = lines.get(timeout=0.5)
            except queue.Empty:
                self._put(batch)
                batch = []
                continue
            if line is None:
                open_streams -= 1
                continue
            if tag == "err" and PODMAN_SAYS.match(line):
                said.append(line.strip())
                continue
            seen[tag] += 1
            if seen[tag] <= skip[tag]:
                continue
            if self.local_file is not None:
                self.local_file.write(line)
                self.local_file.flush()
            batch.append({"timestamp": int(time.time() * 1000), "message": line.rstrip("\n")})
            if len(batch) >= 200:
                self._put(batch)
                batch = []
        self._put(batch)
        return seen, said

    def close(self) -> None:
        """End `podman logs -f` (podman 4.3's can outlive a container removed under it)."""
        self.closing = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def _put(self, batch: list[dict]) -> None:
        if not batch:
            return
        with contextlib.suppress(Exception):
            self.logs.put_log_events(logGroupName=self.group, logStreamName=self.stream, logEvents=batch)


def container_running(name: str) -> bool:
    return bool((podman.state(name) or {}).get("Running"))


def _read_lines(stream, tag: str, lines: queue.Queue) -> None:
    for line in stream:
        lines.put((tag, line))
    lines.put((tag, None))
