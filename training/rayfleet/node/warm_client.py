"""What Ray runs in place of `python` for a worker process of a rayfleet job (runtime_env py_executable,
rayfleet/core/warm_workers.py): it asks the node's fork server for the worker, or becomes the worker itself.

    python -m rayfleet.node.warm_client <Ray's default_worker.py> <its arguments>
    python -m rayfleet.node.warm_client -m <module> <its arguments>     # a recipe job's driver

With a fork server (the node's RAYFLEET_WARM_SOCKET), it sends the arguments, its environment, its working
directory and its standard streams, then stands in for the worker: it passes SIGTERM and SIGINT on and exits
with the worker's status; if it dies, the fork server kills the worker. Without one, or when the fork server
declines (the worker asks for an environment its preloaded modules may have read differently), it execs
its own `python` with the same arguments: a fresh process, as Ray would start.

Imports only the standard library: it runs once per worker process, before the worker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import struct
import sys

from rayfleet.core.warm_workers import SOCKET_ENV

HEADER = struct.Struct("!I")
MAX_REQUEST = 4 * 1024 * 1024  # argv, environment and cwd of one worker


def send_message(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    data = HEADER.pack(len(body)) + body
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.sendall(data)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ConnectionError("closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def recv_message(sock: socket.socket) -> dict:
    (size,) = HEADER.unpack(recv_exact(sock, HEADER.size))
    if size > MAX_REQUEST:
        raise ValueError(f"message of {size} bytes")
    return json.loads(recv_exact(sock, size))


def fresh_process(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def forked(path: str, argv: list[str]) -> int:
    """The worker's exit status once the fork server forked it; raises OSError/ConnectionError when there is
    no fork server to ask, and LookupError when it declines. A stop signal that arrives before the worker's
    pid is known is passed on as soon as it is."""
    worker: list[int] = []
    pending: list[int] = []

    def pass_on(signum, _frame):
        if not worker:
            pending.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker[0], signum)

    previous = {signum: signal.signal(signum, pass_on) for signum in (signal.SIGTERM, signal.SIGINT)}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(path)
            send_message(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}, fds=[0, 1, 2])
            reply = recv_message(sock)
        except BaseException:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            if pending:  # stopped before anything started: stop, as the worker would have
                os.kill(os.getpid(), pending[0])
            raise
        if "declined" in reply:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            raise LookupError(reply["declined"])
        worker.append(int(reply["pid"]))
        for signum in pending:
            pass_on(signum, None)
        try:
            return int(recv_message(sock)["status"])
        except (ConnectionError, ValueError):
            return 1


def main(argv: list[str]) -> None:
    path = os.environ.get(SOCKET_ENV)
    if path:
        try:
            code = forked(path, argv)
        except LookupError as why:
            print(f"rayfleet warm workers: a fresh process for this worker: {why}", file=sys.stderr, flush=True)
        except (OSError, ConnectionError) as error:  # not started yet, or stopped
            print(
                f"rayfleet warm workers: no fork server at {path} ({error}): a fresh process",
                file=sys.stderr,
                flush=True,
            )
        else:
            sys.exit(code)
    fresh_process(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
