"""`rayfleet-node health` (rayfleet/node/health.py) against a real HTTP server on 127.0.0.1 standing in for
the head's dashboard: it passes only on Ray's "success" from /api/gcs_healthz. That Ray's dashboard serves it
without the token, with the GCS alive, is checked on the real local cluster
(tests/integration/test_local_cluster_token_auth.py) and in the images (tests/images/test_least_privilege.py)."""

from __future__ import annotations

import json
import socket

import pytest

from rayfleet.node import ray_node
from tests.unit.node.http_stub import QuietHandler, serving


class Dashboard(QuietHandler):
    status, body, paths = 200, b"success", []

    def do_GET(self):  # http.server names the handler
        type(self).paths.append(self.path)
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
def dashboard():
    Dashboard.status, Dashboard.body, Dashboard.paths = 200, b"success", []
    with serving(Dashboard) as port:
        yield port


def env_for(port: int) -> dict:
    return {"RAY_AUTH_MODE": "token", "RAYFLEET_RAY_PORTS": json.dumps({"dashboard": {"from": port, "to": port}})}


def test_the_head_is_healthy_when_its_dashboard_says_the_gcs_answers(dashboard, capsys):
    assert ray_node.main(["health"], env_for(dashboard)) == 0
    assert Dashboard.paths == ["/api/gcs_healthz"]
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("status", "body", "said"),
    [
        (503, b"", "HTTP 503"),  # the dashboard runs; the GCS did not answer it
        (200, b"<html>", "answered '<html>'"),  # something else on the port
    ],
)
def test_a_dashboard_without_its_gcs_is_unhealthy_and_says_why(dashboard, capsys, status, body, said):
    Dashboard.status, Dashboard.body = status, body
    assert ray_node.main(["health"], env_for(dashboard)) == 1
    err = capsys.readouterr().err
    assert err.startswith("rayfleet-node health: unhealthy: http://127.0.0.1:") and said in err
    assert err.count("\n") == 1


def test_nothing_listening_is_unhealthy(capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert ray_node.main(["health"], env_for(port)) == 1
    assert "unhealthy" in capsys.readouterr().err
