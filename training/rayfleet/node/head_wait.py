"""Finding the head from a worker or the trainer: its Cloud Map name resolved, its GCS answering, and whether
the name has moved to a new head since this node joined (then the node rejoins)."""

from __future__ import annotations

import socket
import subprocess
import time

from rayfleet.node.say import say


class Stopped(Exception):
    """The task is being stopped (SIGTERM) while the node waits for its head."""


def resolve(host: str, port: int) -> str:
    """The head's IPv4 address as DNS gives it now (Cloud Map: a replaced head has a new one)."""
    return socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]


def gcs_problem(address: str, port: int, timeout: float = 30) -> str | None:
    """None when the GCS at address:port answers Ray's own health check with this task's token; else why not.

    An open port is not enough: a GCS still starting, something else on the port, or a head that refuses
    this token (InvalidAuthToken) all accept the connection."""
    try:
        socket.create_connection((address, port), timeout=3).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    command = ["ray", "health-check", "--address", f"{address}:{port}"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"the GCS did not answer `ray health-check` within {timeout:.0f}s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    return f"ray health-check: {(lines or [f'exit {result.returncode}'])[-1][:300]}"


def wait_for_head(host: str, port: int, timeout: float, interval: float = 2.0, stopping=lambda: False) -> str:
    """Resolve the head's name and wait until its GCS answers Ray's health check; return its IP."""
    deadline = time.monotonic() + timeout
    started, last_log, reason = time.monotonic(), 0.0, ""
    while True:
        if stopping():
            raise Stopped
        try:
            address = resolve(host, port)
            reason = gcs_problem(address, port, timeout=max(5.0, min(30.0, deadline - time.monotonic())))
            if reason is None:
                say(f"head {host}:{port} ({address}) answers after {time.monotonic() - started:.0f}s")
                return address
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now >= deadline:
            raise SystemExit(
                f"rayfleet-node: error: the head {host}:{port} did not answer within {timeout:.0f}s ({reason}); "
                "is the head service running? (rayfleet status)"
            )
        if now - last_log >= 10:
            say(f"waiting for the head {host}:{port} ({now - started:.0f}s of {timeout:.0f}s): {reason}")
            last_log = now
        time.sleep(interval)


def head_moved(host: str, port: int, joined: str) -> str | None:
    """The head's new address when its name now points at another GCS that answers; else None."""
    try:
        address = resolve(host, port)
    except OSError:
        return None  # between heads: the old raylet keeps trying until Ray gives up on it
    if address == joined or gcs_problem(address, port) is not None:
        return None
    return address
