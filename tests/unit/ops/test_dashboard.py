"""`rayfleet dashboard` (rayfleet/ops/dashboard.py): the one-shot token handoff on 127.0.0.1 (the cookie Ray's
dashboard reads, once, at a path no one can guess, never in the URL it redirects to), and the SSM port-forward
it builds for the deployment's head, its local end pinned to 127.0.0.1. That Ray's real dashboard accepts the
cookie: tests/integration/test_dashboard_on_local_cluster.py."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from rayfleet.core.errors import ConfigError
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops import dashboard

TOKEN = "tok-" + "x" * 40


def get(url: str) -> http.client.HTTPResponse:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("GET", parts.path)
    return connection.getresponse()


def test_the_handoff_answers_once_at_its_own_path_on_localhost_only():
    handoff = dashboard.Handoff(TOKEN, "http://127.0.0.1:8265/#/jobs/j1")
    parts = urlsplit(handoff.url)
    assert parts.hostname == "127.0.0.1" and handoff.server.server_address[0] == "127.0.0.1"
    assert len(parts.path) > 30  # a random path: another local process cannot guess it
    guessed = get(f"http://127.0.0.1:{parts.port}/")
    assert guessed.status == 404 and guessed.getheader("Set-Cookie") is None
    answer = get(handoff.url)
    assert answer.status == 303 and answer.getheader("Location") == "http://127.0.0.1:8265/#/jobs/j1"
    cookie = answer.getheader("Set-Cookie")
    assert cookie == f"ray-authentication-token={TOKEN}; Path=/; HttpOnly; SameSite=Strict"
    assert TOKEN not in answer.getheader("Location") and TOKEN not in handoff.url
    assert handoff.done.wait(5)
    deadline = time.monotonic() + 10  # once: the server closes after its one answer
    while time.monotonic() < deadline:
        try:
            get(handoff.url).read()
        except OSError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("the handoff still answers after its one answer")


def outputs(tmp_path) -> Outputs:
    names = {"region": "us-east-1", "cluster_name": "rf", "private_subnet_ids": [], "task_security_group_id": "sg"}
    names |= {"trainer_task_definition": "t", "head_service_name": "h", "results_bucket": "b", "trainer_log_group": "l"}
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps({**names, "worker_groups": {"ddp": {"service_name": "w"}}}))
    return Outputs.load(path)


def test_the_port_forward_targets_the_head_container_and_listens_on_localhost_only(tmp_path):
    task = {
        "taskArn": "arn:aws:ecs:us-east-1:123456789012:task/rf/0123abcd",
        "containers": [{"name": "gpu-metrics", "runtimeId": "other"}, {"name": "ray-head", "runtimeId": "0123abcd-99"}],
    }
    argv = dashboard.forward_argv("/venv/bin/aws", "us-east-1", outputs(tmp_path), task, "ray-head", 18265)
    assert argv[:3] == ["/venv/bin/aws", "ssm", "start-session"]
    assert argv[argv.index("--target") + 1] == "ecs:rf_0123abcd_0123abcd-99"
    assert argv[argv.index("--document-name") + 1] == "AWS-StartPortForwardingSession"
    assert json.loads(argv[argv.index("--parameters") + 1]) == {"portNumber": ["8265"], "localPortNumber": ["18265"]}
    assert dashboard.forward_env({"SSM_PLUGIN_LOCAL_HOST": "0.0.0.0", "A": "b"}) == {
        "SSM_PLUGIN_LOCAL_HOST": "127.0.0.1",
        "A": "b",
    }
    catalog = json.loads((Path(__file__).parents[3] / "infra" / "catalog" / "ray_ports.json").read_text())
    assert catalog["dashboard"]["from"] == dashboard.DASHBOARD_PORT  # the port the head's dashboard listens on


def test_no_local_cluster_is_one_line_naming_the_verb_that_starts_one(monkeypatch):
    monkeypatch.setattr(dashboard.cluster, "running", lambda: None)
    with pytest.raises(ConfigError, match=r"^no local Ray cluster is running: rayfleet cluster up$"):
        dashboard.open_local()


def test_the_operator_policy_grants_the_port_forward():
    from tools import operator_policy

    granted = {a for s in operator_policy.policy(set())["Statement"] for a in s["Action"]}
    assert set(dashboard.CLI_ACTIONS) <= granted
