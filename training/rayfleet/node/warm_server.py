"""A node's fork server: worker processes for rayfleet jobs, forked from a process that imported torch and
Ray Train's other dependencies once, when the node started (the contract: rayfleet/core/warm_workers.py).

    python -m rayfleet.node.warm_server SOCKET [--with-parent]   # beside `ray start`, in the node's environment

It imports the preload modules and refuses to serve if that imported Ray or initialized CUDA, then listens
on SOCKET (mode 0600: the node's user only, who runs Ray's workers anyway). It is one thread and never runs
a worker's code itself, only forks. For each request (rayfleet/node/warm_client.py) it checks that the
worker's environment is the one its modules saw at import (else it declines and the client starts a fresh
process), forks, and in the child takes the worker's standard streams, environment, working directory,
sys.path and a process group of its own, forgets its own package's modules, gives torch the worker's thread
count and NumPy's and torch's generators fresh entropy (Python's reseeds itself on fork), and runs Ray's
worker script (or a job driver's module) as __main__. The parent reports the child's exit status to the
client, and kills the child if the client goes first. What the child does: rayfleet/node/warm_fork.py.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import traceback
from pathlib import Path

from rayfleet.core.warm_workers import (
    DEFAULT_PRELOAD,
    NEVER_PRELOADED,
    PRELOAD_ENV,
    SOCKET_ENV,
    import_time_differences,
)
from rayfleet.node import warm_fork
from rayfleet.node.warm_client import HEADER, MAX_REQUEST, recv_exact, send_message

REQUEST_TIMEOUT_S = 10


def preload(modules: list[str]) -> list[str]:
    """Import the modules that are installed; return those that are not. Refuses (RuntimeError) if that
    imported Ray (its configuration would be the server's, not each worker's) or initialized CUDA (a fork
    cannot use a CUDA context)."""
    missing = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            missing.append(name)
    if NEVER_PRELOADED in sys.modules:
        raise RuntimeError(f"the preload modules imported {NEVER_PRELOADED}")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError("importing the preload modules initialized CUDA")
    return missing


def read_request(conn: socket.socket) -> tuple[dict, list[int]]:
    conn.settimeout(REQUEST_TIMEOUT_S)
    data, fds, _flags, _addr = socket.recv_fds(conn, 65536, 3)
    if len(data) < HEADER.size:
        data += recv_exact(conn, HEADER.size - len(data))
    (size,) = HEADER.unpack(data[: HEADER.size])
    if size > MAX_REQUEST:
        raise ValueError(f"a request of {size} bytes")
    body = data[HEADER.size :]
    body += recv_exact(conn, size - len(body)) if size > len(body) else b""
    request = json.loads(body)
    conn.settimeout(None)
    return request, fds


class Server:
    def __init__(self, path: str, before: dict[str, str], base_path: list[str], parent: int | None = None) -> None:
        """before: the environment before the preload; os.environ is the one after. parent: a process whose
        end ends the server (the node that started it), else it serves until stopped."""
        self.path = path
        self.parent = parent
        self.preloaded_env = dict(os.environ)
        # What importing the modules set (torch's inductor sets its cache dir): a fresh worker's imports set
        # the same, so a worker that does not name them gets the server's.
        self.set_by_import = {k: v for k, v in os.environ.items() if k not in before}
        self.base_path = base_path
        self.selector = selectors.DefaultSelector()
        self.children: dict[int, socket.socket] = {}  # worker pid -> its client's connection
        self.stopping = False
        self.own_fds: list[int] = []  # the listener and the wake-up pipe: a worker closes them

    def serve_forever(self) -> None:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(self.path)
        finally:
            os.umask(old_umask)
        listener.listen(64)
        self.own_fds = [listener.fileno(), wake_r, wake_w]
        self.selector.register(listener, selectors.EVENT_READ, "listener")
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        print(f"warm worker server ready on {self.path}", flush=True)
        while not self.stopping:
            for key, _ in self.selector.select(timeout=5):
                if key.data == "listener":
                    self.accept(listener)
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 4096)
                else:
                    self.client_gone(key.fileobj, key.data)
            self.reap()
            if self.parent is not None and os.getppid() != self.parent:
                self.stopping = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def stop(self, *_args) -> None:
        self.stopping = True

    def accept(self, listener: socket.socket) -> None:
        conn, _ = listener.accept()
        fds: list[int] = []
        try:
            request, fds = read_request(conn)
            argv, cwd = list(request["argv"]), str(request["cwd"])
            env = {**self.set_by_import, **request["env"]}
            differences = import_time_differences(self.preloaded_env, env)
            if not warm_fork.runnable(argv):
                differences = ["interpreter options"]
            if differences:
                send_message(conn, {"declined": f"{', '.join(differences)} differ from the fork server's"})
                conn.close()
                return
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                self.become_worker(fds, argv, env, cwd)  # never returns
            send_message(conn, {"pid": pid})
            self.children[pid] = conn
            self.selector.register(conn, selectors.EVENT_READ, pid)
        except (OSError, ValueError, KeyError, TypeError) as error:
            print(f"warm worker server: a bad request: {error!r}", file=sys.stderr, flush=True)
            conn.close()
        finally:
            for fd in fds:
                os.close(fd)

    def client_gone(self, conn: socket.socket, pid: int) -> None:
        """The client's connection is readable only when it closes: the client died before its worker."""
        with contextlib.suppress(OSError):
            if conn.recv(1):
                return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                self.selector.unregister(conn)
                with contextlib.suppress(OSError):
                    send_message(conn, {"status": os.waitstatus_to_exitcode(status)})
                conn.close()

    def become_worker(self, fds: list[int], argv: list[str], env: dict[str, str], cwd: str) -> None:
        code = 1
        try:
            # Its own process group, as Ray gives each worker it starts: the raylet kills a finished worker's
            # whole group, which would otherwise be the server's.
            os.setpgid(0, 0)
            signal.set_wakeup_fd(-1)
            for signum, handler in (
                (signal.SIGCHLD, signal.SIG_DFL),
                (signal.SIGTERM, signal.SIG_DFL),
                (signal.SIGINT, signal.default_int_handler),
            ):
                signal.signal(signum, handler)
            self.selector.close()
            for conn in self.children.values():
                conn.close()
            for fd in self.own_fds:
                os.close(fd)
            code = warm_fork.become(fds, argv, env, cwd, self.base_path)
        except BaseException:
            traceback.print_exc()
        finally:
            with contextlib.suppress(BaseException):
                atexit._run_exitfuncs()
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)


def spawn(
    sock: Path, env: dict[str, str], log=None, cwd: Path | None = None, with_parent: bool = False
) -> tuple[subprocess.Popen, dict]:
    """Start a node's fork server on `sock` in `env` (the environment the node's `ray start` gets next);
    return it and that environment naming the socket, so Ray's workers find it. It preloads while Ray
    starts; until it listens, workers start fresh. `log`: a file for its output (else this process's).
    `with_parent`: it ends when this process does (an image's node), else when stopped (the local cluster's
    `down`)."""
    env = {**env, SOCKET_ENV: str(sock)}
    server = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.node.warm_server", str(sock), *(["--with-parent"] if with_parent else [])],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=cwd,
    )
    return server, env


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or argv[1:] not in ([], ["--with-parent"]):
        print("usage: python -m rayfleet.node.warm_server SOCKET [--with-parent]", file=sys.stderr)
        return 2
    parent = os.getppid() if argv[1:] else None
    own = {os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    base_path = [p for p in sys.path[1:] if os.path.abspath(p) not in own]  # [0]: `-m`'s working directory
    before = dict(os.environ)
    modules = [m for m in os.environ.get(PRELOAD_ENV, ",".join(DEFAULT_PRELOAD)).split(",") if m]
    try:
        missing = preload(modules)
    except Exception as error:  # any failure means: no fork server; workers start fresh
        print(f"warm worker server: not serving ({error!r}); workers start as fresh processes", file=sys.stderr)
        return 1
    if missing:
        print(f"warm worker server: not installed, not preloaded: {', '.join(missing)}", flush=True)
    Server(argv[0], before, base_path, parent).serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
