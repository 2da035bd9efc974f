"""`rayfleet dashboard`: Ray's dashboard in the browser, of the local cluster, or of the deployment's head through
an SSM port-forward, with the Ray token handed over once and every local end on 127.0.0.1 only.

    rayfleet dashboard [--run RUN] [--port 8265] [--no-browser]     # the deployment's when one is deployed
    rayfleet dashboard --local                                      # the local cluster's

The token: Ray's dashboard takes it from a cookie for browser sessions (Ray's own name, `COOKIE`). A one-shot
server on 127.0.0.1 answers one request, at a random path, with that cookie (HttpOnly, SameSite=Strict) and a
redirect to the dashboard; cookies do not separate ports, so the browser then sends it to the dashboard's port.
The token is never printed and never in a URL; the handoff ends after its one answer, or after HANDOFF_S.
The deployment's dashboard: `aws ssm start-session` to the head task with AWS-StartPortForwardingSession (the
ECS Exec agent in the container serves it, as for `rayfleet exec`); the Session Manager plugin listens on
localhost, pinned to 127.0.0.1 (SSM_PLUGIN_LOCAL_HOST). It needs ssm:StartSession (infra/operator-policy.json).
"""

from __future__ import annotations

import http.server
import json
import os
import secrets
import socket
import subprocess
import threading
import time
import webbrowser
from collections.abc import Callable
from pathlib import Path

from rayfleet.core.aws import Aws, MissingOutputs
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.core.ray_auth import read_token
from rayfleet.core.run_dir import LOCAL_RUNS, RunDir, runs_root
from rayfleet.ecs import shell
from rayfleet.ecs.outputs import Outputs
from rayfleet.local import cluster

COOKIE = "ray-authentication-token"  # ray._private.authentication's cookie for dashboard sessions
DASHBOARD_PORT = 8265  # the head's, infra/catalog/ray_ports.json
DOCUMENT = "AWS-StartPortForwardingSession"
LOCALHOST = "127.0.0.1"
HANDOFF_S = 120.0
FORWARD_WAIT_S = 60.0
# What the AWS CLI calls for this verb (not a boto3 call: tools/operator_policy.py adds these to the operator's).
CLI_ACTIONS = ("ssm:StartSession", "ssm:TerminateSession")


class Handoff:
    """One answer at a random path of 127.0.0.1: the token as the dashboard's cookie, and a redirect to it."""

    def __init__(self, token: str, target: str):
        path = "/" + secrets.token_urlsafe(24)
        self.done = threading.Event()
        handoff = self

        class Answer(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path != path or handoff.done.is_set():
                    self.send_error(404)
                    return
                self.send_response(303)
                self.send_header("Set-Cookie", f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict")
                self.send_header("Location", target)
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                handoff.done.set()

            def log_message(self, *args):  # no request lines on the terminal
                pass

        self.server = http.server.HTTPServer((LOCALHOST, 0), Answer)
        self.url = f"http://{LOCALHOST}:{self.server.server_address[1]}{path}"
        threading.Thread(target=self._serve, name="rayfleet-dashboard-handoff", daemon=True).start()

    def _serve(self) -> None:
        deadline = time.monotonic() + HANDOFF_S
        self.server.timeout = 0.5
        while not self.done.is_set() and time.monotonic() < deadline:
            self.server.handle_request()
        self.server.server_close()


def run_page(run: str | None, runs_dir: str) -> str:
    """The dashboard's page of a run's Ray job (its record's job id), else its overview."""
    if not run:
        return "/"
    job = RunDir(runs_dir, run).record().get("job_id")
    if not isinstance(job, str) or not job.replace("-", "").replace("_", "").isalnum():
        raise ConfigError(f"run {run} has no Ray job in its record (a job started directly has no page of its own)")
    return f"/#/jobs/{job}"


def open_local(run: str | None = None, browser: Callable[[str], bool] = webbrowser.open, say=print) -> int:
    state = cluster.running()
    if state is None:
        raise ConfigError("no local Ray cluster is running: rayfleet cluster up")
    target = state.dashboard_url + run_page(run, str(Path(LOCAL_RUNS).resolve()))
    handoff = Handoff(read_token(), target)
    say(f"Ray's dashboard of the local cluster: {target} (the token goes to your browser once, as a cookie)")
    if not browser(handoff.url):
        say(f"no browser here: open {handoff.url} once within {HANDOFF_S:.0f} s")
    handoff.done.wait(HANDOFF_S)
    return 0


def forward_argv(cli: str, region: str, out: Outputs, task: dict, container: str, port: int) -> list[str]:
    """`aws ssm start-session` forwarding 127.0.0.1:`port` to the head container's dashboard."""
    runtime = next(c.get("runtimeId") for c in task.get("containers", []) if c.get("name") == container)
    target = f"ecs:{out.cluster_name}_{task['taskArn'].rsplit('/', 1)[-1]}_{runtime}"
    parameters = {"portNumber": [str(DASHBOARD_PORT)], "localPortNumber": [str(port)]}
    return [cli, "ssm", "start-session", "--region", region, "--target", target, "--document-name", DOCUMENT,
            "--parameters", json.dumps(parameters)]  # fmt: skip


def forward_env(env: dict | None = None) -> dict:
    """The plugin's environment: its local end on 127.0.0.1, whatever the caller's environment says."""
    return {**(os.environ if env is None else env), "SSM_PLUGIN_LOCAL_HOST": LOCALHOST}


def wait_for_port(port: int, child: subprocess.Popen, deadline_s: float = FORWARD_WAIT_S) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise RayfleetError(f"the port-forward ended before it listened (exit {child.returncode}): see above")
        try:
            socket.create_connection((LOCALHOST, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.5)
    raise RayfleetError(f"the port-forward did not listen on {LOCALHOST}:{port} within {deadline_s:.0f} s")


def open_deployed(out: Outputs, port: int, run: str | None, browser=webbrowser.open, say=print) -> int:
    aws = Aws(out.region)
    cli = shell.find_cli()
    shell.check_plugin()
    task, container = shell.find_task(aws, out, "head")
    shell.check_exec_agent(task, container)
    token = aws.client("secretsmanager").get_secret_value(SecretId=out.ray_token_secret_arn)["SecretString"]
    page = run_page(run, runs_root(out.results_bucket)) if run else "/"
    child = subprocess.Popen(forward_argv(cli, out.region, out, task, container, port), env=forward_env())
    try:
        wait_for_port(port, child)
        target = f"http://{LOCALHOST}:{port}{page}"
        handoff = Handoff(token, target)
        say(f"Ray's dashboard of {out.cluster_name}: {target}, through SSM to the head; Ctrl-C ends it")
        if not browser(handoff.url):
            say(f"no browser here: open {handoff.url} once within {HANDOFF_S:.0f} s")
        return child.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=10)


def dashboard(local: bool = False, port: int = DASHBOARD_PORT, run: str | None = None, outputs: str | None = None,
              browser: bool = True) -> int:  # fmt: skip
    """`rayfleet dashboard`: the deployment's when one is deployed (or --local), else the local cluster's."""
    opener = webbrowser.open if browser else (lambda url: False)
    if not local:
        try:
            out = Outputs.load(outputs)
        except MissingOutputs:
            out = None
        if out is not None:
            return open_deployed(out, port, run, opener)
    return open_local(run, opener)
