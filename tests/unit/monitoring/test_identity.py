"""The sidecar's identity: the cluster from ECS task metadata, the instance from the file the host writes at
boot, the environment above both; the instance metadata service (IMDS) is never asked (issue 15 item 1:
IMDS is closed to every container, since it hands out the instance role's credentials)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from monitoring.identity import Identity, discover


class _Metadata(BaseHTTPRequestHandler):
    """ECS task metadata (/task) and, to catch any use of it, an IMDS at the same address."""

    requests: ClassVar[list[str]] = []

    def do_PUT(self):
        self.requests.append(f"PUT {self.path}")
        self._send("token-123")

    def do_GET(self):
        self.requests.append(f"GET {self.path}")
        if self.path == "/task":
            return self._send(json.dumps({"Cluster": "arn:aws:ecs:us-west-2:123456789012:cluster/rf-prod"}))
        self._send({"/latest/meta-data/instance-id": "i-imds", "/latest/meta-data/instance-type": "x.imds"}[self.path])

    def _send(self, body: str):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata():
    _Metadata.requests = []
    server = HTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", _Metadata.requests
    finally:
        server.shutdown()


def test_identity_from_task_metadata_and_the_hosts_identity_file(metadata, tmp_path):
    url, requests = metadata
    identity_file = tmp_path / "identity.json"
    identity_file.write_text(json.dumps({"instance_id": "i-0123", "instance_type": "g6e.12xlarge"}))
    found = discover(
        {
            "ECS_CONTAINER_METADATA_URI_V4": url,
            "RAYFLEET_IDENTITY_FILE": str(identity_file),
            "RAYFLEET_IMDS_ENDPOINT": url,  # the old way: ignored
            "RAYFLEET_RUN_NAME": "r1",
        }
    )
    assert found == Identity("rf-prod", "i-0123", "g6e.12xlarge", "r1")
    assert requests == ["GET /task"]  # task metadata only: no IMDS token, no meta-data


def test_on_ecs_without_the_file_imds_is_still_not_asked(metadata, tmp_path, capsys):
    url, requests = metadata
    found = discover(
        {
            "ECS_CONTAINER_METADATA_URI_V4": url,
            "RAYFLEET_IDENTITY_FILE": str(tmp_path / "absent.json"),
            "RAYFLEET_INSTANCE_TYPE": "g5.xlarge",
        }
    )
    assert requests == ["GET /task"]
    assert found.cluster_name == "rf-prod" and found.instance_type == "g5.xlarge" and found.instance_id
    assert "absent.json" in capsys.readouterr().err  # said once, on stderr: metrics go on under the hostname


def test_the_environment_wins_over_the_file(tmp_path):
    identity_file = tmp_path / "identity.json"
    identity_file.write_text(json.dumps({"instance_id": "i-file", "instance_type": "g5.xlarge"}))
    found = discover(
        {
            "RAYFLEET_CLUSTER_NAME": "c",
            "RAYFLEET_INSTANCE_ID": "i-env",
            "RAYFLEET_IDENTITY_FILE": str(identity_file),
        }
    )
    assert found == Identity("c", "i-env", "g5.xlarge")


def test_a_malformed_identity_file_is_named_and_skipped(tmp_path, capsys):
    identity_file = tmp_path / "identity.json"
    identity_file.write_text("{not json")
    found = discover({"RAYFLEET_IDENTITY_FILE": str(identity_file), "RAYFLEET_CLUSTER_NAME": "c"})
    assert found.instance_type == "unknown" and str(identity_file) in capsys.readouterr().err


def test_identity_off_ecs_asks_no_metadata_service():
    found = discover({"RAYFLEET_CLUSTER_NAME": "laptop"})
    assert found.cluster_name == "laptop" and found.instance_type == "unknown" and found.run_name is None
