"""A container's output into its CloudWatch Logs stream, as ECS's awslogs driver ships it: `podman logs -f`.

podman 4.3's follower sometimes ends while its container runs on ("Waiting for container to exit:
unexpected end of JSON input", seen under load); the shipper then follows again from the log's start and
skips the lines it already sent, so the stream gets every line once.
"""

from __future__ import annotations

import contextlib
import queue
import subprocess
import sys
import tempfile
import threading
import time

from tools.rehearsal import podman


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
        sent = 0
        while True:
            sent, problem = self._follow(skip=sent)
            if self.closing or not self.running():
                return
            self.restarts += 1
            print(f"[rehearsal] following {self.podman_name}'s output again ({problem})", file=sys.stderr, flush=True)
            time.sleep(1)

    def _follow(self, skip: int) -> tuple[int, str]:
        """One `podman logs -f` until it ends; the first `skip` lines went out before. (lines seen, podman's
        last error line)."""
        with tempfile.TemporaryFile("w+") as errors:
            self.proc = proc = subprocess.Popen(
                ["podman", "logs", "-f", self.podman_name],
                env=podman.env(),
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                errors="replace",
                start_new_session=True,
            )
            seen = self._ship(proc.stdout, skip)
            proc.wait()
            errors.seek(0)
            said = [line.strip() for line in errors if line.strip()]
        return seen, said[-1] if said else f"podman logs exited {proc.returncode}"

    def _ship(self, stdout, skip: int) -> int:
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=_read_lines, args=(stdout, lines), daemon=True).start()
        batch: list[dict] = []
        seen = 0
        while True:
            # A quiet container's last lines go out within half a second, not with its next line.
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                self._put(batch)
                batch = []
                continue
            if line is None:
                break
            seen += 1
            if seen <= skip:
                continue
            if self.local_file is not None:
                self.local_file.write(line)
                self.local_file.flush()
            batch.append({"timestamp": int(time.time() * 1000), "message": line.rstrip("\n")})
            if len(batch) >= 200:
                self._put(batch)
                batch = []
        self._put(batch)
        return seen

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


def _read_lines(stream, lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)
