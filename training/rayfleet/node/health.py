"""`rayfleet-node health`: the head container's health check (infra/modules/ray/task_definitions.tf).

Healthy means the head's dashboard answers and its GCS is alive: Ray's own `/api/gcs_healthz`, which the
dashboard answers "success" only after the GCS answered it, asked over the dashboard's GCS connection.
Ray serves it without the token (a public path, like a load balancer's probe), so the check needs no
secret. A TCP connect to the GCS port, the check before, passed a GCS that accepted connections and no
longer answered, and a head whose dashboard (the Jobs API every `make run` submits through) had died.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

from rayfleet.node.node_spec import ports

PATH = "/api/gcs_healthz"
TIMEOUT_S = 4  # under the task definition's 5 s, so a hung dashboard is a clear "timed out", not a kill


def problem(env: dict, timeout_s: float = TIMEOUT_S) -> str | None:
    """None when this task's head answers; else why not, in one line."""
    url = f"http://127.0.0.1:{ports(env)['dashboard']['from']}{PATH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read(200).decode(errors="replace").strip()
    except urllib.error.HTTPError as exc:  # 503: the dashboard runs, the GCS did not answer it
        return f"{url}: HTTP {exc.code} {exc.reason}"
    except (OSError, ValueError) as exc:  # refused, timed out: no dashboard
        return f"{url}: {getattr(exc, 'reason', exc)}"
    return None if body == "success" else f"{url}: answered {body!r}, not 'success'"


def main(env: dict) -> int:
    reason = problem(env)
    if reason is None:
        return 0
    print(f"rayfleet-node health: unhealthy: {reason}", file=sys.stderr)
    return 1
