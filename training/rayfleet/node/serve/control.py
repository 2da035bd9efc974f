"""Deploy, wait for, inspect and shut down Serve through the dashboard's REST API, with Ray's own client.

    python -m rayfleet.node.serve.control up --config-json '{...}'   # in the trainer task on ECS
    python -m rayfleet.node.serve.control down

The laptop calls the same functions for the local cluster. The dashboard URL comes from the caller, or
RAYFLEET_DASHBOARD_URL (the trainer task's environment).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

from rayfleet.core import ray_auth
from rayfleet.core.aws import run_cli
from rayfleet.core.errors import RayfleetError
from rayfleet.serve.summary import lines, summarize

APP = "rayfleet"  # one served run per cluster: serving another replaces it
FAILED = {"DEPLOY_FAILED", "UNHEALTHY"}


def client(dashboard_url: str):
    from ray.dashboard.modules.serve.sdk import ServeSubmissionClient

    return ServeSubmissionClient(dashboard_url)


def serve_config(args: dict, port: int) -> dict:
    """Serve's declarative config: one application, the proxy on the head only and on 127.0.0.1 only.

    Serve's proxy has no authentication and serves every application any token holder deploys, so it is never
    on the network: locally the laptop calls it (the replicas check the key), and on ECS only the serve gate
    beside it in the head's task reaches it (port GATED_PROXY_PORT), which checks the key on every route.
    """
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [{"name": APP, "route_prefix": "/", "import_path": "rayfleet.serve.app:build", "args": args}],
    }


def deploy_and_wait(dashboard_url: str, config: dict, timeout_s: float, say: Callable[[str], None]) -> dict:
    """PUT the config, then report each change until the application runs; RayfleetError when it fails."""
    serve = client(dashboard_url)
    serve.deploy_applications(config)
    say("deploy requested; waiting for the replicas (loading the model)")
    start, last = time.monotonic(), None
    while True:
        apps = summarize(serve.get_serve_details())
        app = next((a for a in apps if a["name"] == APP), None)
        view = "\n".join(lines([app])) if app else "waiting for the Serve controller"
        if view != last:
            say(f"[{time.monotonic() - start:5.0f}s] " + view)
            last = view
        if app and app["status"] == "RUNNING":
            return app
        if app and app["status"] in FAILED:
            reason = app["message"].splitlines()[-1] if app["message"] else app["status"]
            raise RayfleetError(f"the application failed to start: {reason}")
        if time.monotonic() - start > timeout_s:
            raise RayfleetError(
                f"the application is not running after {timeout_s:.0f}s (rayfleet serve status; rayfleet serve down)"
            )
        time.sleep(2)


def status(dashboard_url: str) -> list[dict]:
    return summarize(client(dashboard_url).get_serve_details())


def shutdown(dashboard_url: str) -> None:
    client(dashboard_url).delete_applications()


def main(argv: list[str] | None = None) -> int:
    ray_auth.use_token_auth()
    parser = argparse.ArgumentParser(prog="python -m rayfleet.node.serve.control", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "status", "down"])
    parser.add_argument("--config-json", help="up: Serve's config (rayfleet.ops.serve builds it)")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--dashboard", default=os.environ.get("RAYFLEET_DASHBOARD_URL"))
    opts = parser.parse_args(argv)
    if not opts.dashboard:
        raise RayfleetError("no dashboard URL: pass --dashboard or set RAYFLEET_DASHBOARD_URL")
    if opts.action == "up":
        deploy_and_wait(opts.dashboard, json.loads(opts.config_json), opts.timeout, lambda m: print(m, flush=True))
    elif opts.action == "down":
        shutdown(opts.dashboard)
    print("\n".join(lines(status(opts.dashboard))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
