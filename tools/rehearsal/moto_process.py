"""The rehearsal's moto in a process of its own, serving the listening sockets tools/rehearsal/cloud.py's `Moto`
bound (127.0.0.1 and the rehearsal network's gateway) and handed over by file descriptor.

    python -m tools.rehearsal.moto_process FD [FD ...]    (started by cloud.Moto; the key below in its env)

Why a process: moto served from threads of the rehearsal's own process shared one GIL with everything else
that process does (every container's log shipped through boto3, the agent's ECS calls, podman polls), and a
container's S3 request then waited on it. In CI Ray Train's controller failed a run so, writing its snapshot
("curlCode: 28, Timeout was reached"): tests/unit/tools/rehearsal/test_moto_process.py.

What moto's API has no call for, the rehearsal writes into moto's ECS backend here (see cloud.py's docstring),
through one route beside moto's own, RECORD_PATH, that only a request carrying this process's key may use (the
containers reach the same server at the gateway and never see the key).
"""

from __future__ import annotations

import hmac
import json
import signal
import socket
import sys
import threading

ACCOUNT = "123456789012"
RECORD_PATH = "/_rehearsal/record"
KEY_ENV = "RAYFLEET_REHEARSAL_MOTO_KEY"
KEY_HEADER = "X-Rehearsal-Key"


def _task(backend, cluster: str, task_arn: str):
    return backend.tasks.get(cluster, {}).get(task_arn)


def record(region: str, what: str, cluster: str, arn: str, **fields) -> None:
    """One write of what moto's API cannot record, into this process's ECS backend."""
    from moto.ecs.models import ecs_backends

    backend = ecs_backends[ACCOUNT][region]
    if what == "service":
        found = backend.services.get(f"{cluster}:{arn}")
        if found is not None:
            found.running_count, found.pending_count = fields["running"], fields["pending"]
        return
    task = _task(backend, cluster, arn)
    if task is None:
        return
    if what == "exit":
        for container in task.containers:  # moto keeps the first container definition only
            container.exitCode = fields["exit_code"]
            container.last_status = "STOPPED"
    elif what == "pending":  # moto starts a task RUNNING at RunTask; ECS says PENDING until its containers run
        task.last_status = "PENDING"
    elif what == "running":
        task.last_status = "RUNNING"
        task.health_status = fields["health"]  # DescribeTasks' healthStatus (moto has no field of its own)
        for container in task.containers:
            container.last_status = "RUNNING"
            container.health_status = fields["health"]
    else:
        raise ValueError(f"no such record: {what}")


def application(key: str):
    """moto_server's app, and RECORD_PATH for the holder of `key`."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    moto_app = DomainDispatcherApplication(create_backend_app)

    def app(environ, start_response):
        if environ.get("PATH_INFO") != RECORD_PATH:
            return moto_app(environ, start_response)
        given = environ.get("HTTP_" + KEY_HEADER.upper().replace("-", "_"), "")
        if environ.get("REQUEST_METHOD") != "POST" or not hmac.compare_digest(given, key):
            start_response("403 Forbidden", [("Content-Type", "text/plain")])
            return [b"forbidden"]
        size = int(environ.get("CONTENT_LENGTH") or 0)
        record(**json.loads(environ["wsgi.input"].read(size)))
        start_response("204 No Content", [])
        return []

    return app


def serve(fds: list[int], key: str) -> None:
    from moto.moto_api import state_manager
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    from tools.moto_stack.ecs import patch as ecs_patch

    class Quiet(MotoRequestHandler):
        def log_request(self, *args, **kwargs):  # one line per request would drown the rehearsal's output
            pass

    # moto's ECS as a rendered deployment needs it: registered resources, GPUs, placement constraints; with the
    # S3 patch: DeleteObjects per key, HeadBucket asked as s3:ListBucket (as AWS).
    ecs_patch()
    # moto moves a task one lifecycle step on every describe; ECS tasks run until stopped.
    state_manager.set_transition(model_name="ecs::task", transition={"progression": "manual", "times": 10**9})
    app = application(key)
    servers = []
    for fd in fds:
        with socket.socket(fileno=fd) as sock:
            host, port = sock.getsockname()[:2]
            servers.append(make_server(host, port, app, threaded=True, request_handler=Quiet, fd=sock.fileno()))
    for server in servers:
        threading.Thread(target=server.serve_forever, name=f"moto-{server.host}", daemon=True).start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the terminal's Ctrl-C is the rehearsal's: it stops this
    stopped.wait()
    for server in servers:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    import os

    serve([int(fd) for fd in sys.argv[1:]], os.environ.pop(KEY_ENV))
