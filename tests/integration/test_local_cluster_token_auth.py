"""The local cluster never answers without its token (more in the token-auth issue)."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.integration.helpers import DASHBOARD_PORT, RAY_PORT

pytestmark = pytest.mark.integration
JOBS_API = f"http://127.0.0.1:{DASHBOARD_PORT}/api/jobs/"


def _status(token: str | None) -> int:
    request = urllib.request.Request(JOBS_API)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code


def test_jobs_api_needs_the_token(cluster_env):
    token = Path(cluster_env["RAY_AUTH_TOKEN_PATH"]).read_text().strip()
    assert _status(None) in (401, 403)
    assert _status("0" * 64) in (401, 403)
    assert _status(token) == 200


def test_node_without_the_token_cannot_join(cluster_env, tmp_path):
    env = {k: v for k, v in cluster_env.items() if not k.startswith(("RAY_AUTH_TOKEN", "RAYFLEET"))}
    env["HOME"] = str(tmp_path)  # no ~/.ray/auth_token to fall back on
    ray = Path(sys.executable).parent / "ray"
    result = subprocess.run(
        [
            str(ray),
            "start",
            f"--address=127.0.0.1:{RAY_PORT}",
            "--num-cpus=1",
            "--metrics-export-port=6591",
            "--dashboard-agent-listen-port=6592",
            "--dashboard-agent-grpc-port=6593",
            "--runtime-env-agent-port=6594",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "no authentication token was found" in (result.stdout + result.stderr)


def test_token_is_in_no_process_argv_or_environment(cluster_env):
    token = Path(cluster_env["RAY_AUTH_TOKEN_PATH"]).read_text().strip().encode()
    assert Path(cluster_env["RAY_AUTH_TOKEN_PATH"]).stat().st_mode & 0o777 == 0o600
    ps = subprocess.run(["ps", "-eww", "-o", "args"], capture_output=True, check=True).stdout
    assert b"ray::" in ps or b"raylet" in ps  # the cluster is there to be looked at
    assert token not in ps
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                assert token not in (entry / "environ").read_bytes(), f"token in environ of pid {entry.name}"
            except OSError:
                continue


def test_the_heads_health_check_passes_without_the_token(cluster_env):
    """The one path Ray answers without the token: the head's health check (`rayfleet-node health`,
    rayfleet/node/health.py) reads /api/gcs_healthz, which a real dashboard answers only with its GCS alive."""
    import json

    from rayfleet.node import health

    env = {"RAYFLEET_RAY_PORTS": json.dumps({"dashboard": {"from": DASHBOARD_PORT, "to": DASHBOARD_PORT}})}
    assert health.problem(env) is None
