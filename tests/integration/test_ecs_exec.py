"""`make exec` end to end as far as this machine allows: the verb finds the task in moto, execs the real
`aws ecs execute-command` from .venv, and that CLI calls the endpoint and then the Session Manager plugin.

Between the processes and moto sits a small recording proxy, for what moto does not model: it answers
ExecuteCommand (moto has no such operation) with a session in ECS's response shape, and adds to moto's
DescribeTasks what ECS reports for a task started with ECS Exec (enableExecuteCommand, the container's
runtimeId, the ExecuteCommandAgent RUNNING). Everything else is moto's answer. The plugin is a script that
records its arguments. Not exercised: ECS's own ExecuteCommand (IAM, the agent), the real plugin, SSM.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version

import pytest

from tests.integration.helpers import run_verb

pytestmark = pytest.mark.integration

SESSION = {"sessionId": "rf-s-1", "streamUrl": "wss://ssmmessages.example/rf-s-1", "tokenValue": "tok"}


class EcsProxy(ThreadingHTTPServer):
    """Forwards the AWS JSON calls to moto and records each (operation, request body)."""

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream = upstream
        self.calls: list[tuple[str, dict]] = []
        self.agents: list[str] = []  # each call's User-Agent
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: EcsProxy

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        operation = self.headers.get("X-Amz-Target", "").rsplit(".", 1)[-1]
        self.server.calls.append((operation, json.loads(body or b"{}")))
        self.server.agents.append(self.headers.get("User-Agent", ""))
        if operation == "ExecuteCommand":
            request = json.loads(body)
            answer = {
                "clusterArn": f"arn:aws:ecs:us-east-1:123456789012:cluster/{request['cluster']}",
                "containerArn": f"arn:aws:ecs:us-east-1:123456789012:container/{request['cluster']}/c-1",
                "containerName": request["container"],
                "interactive": request["interactive"],
                "session": SESSION,
                "taskArn": request["task"],
            }
            return self._reply(200, "application/x-amz-json-1.1", json.dumps(answer).encode())
        # The Host header as the client signed it: moto checks the signature (IAM enforced, the operator's keys).
        headers = {k: v for k, v in self.headers.items() if k.lower() != "content-length"}
        try:
            with urllib.request.urlopen(
                urllib.request.Request(self.server.upstream + self.path, data=body, headers=headers), timeout=30
            ) as response:
                status, kind, data = response.status, response.headers.get("Content-Type", ""), response.read()
        except urllib.error.HTTPError as err:
            status, kind, data = err.code, err.headers.get("Content-Type", ""), err.read()
        if operation == "DescribeTasks" and status == 200:
            described = json.loads(data)
            for task in described.get("tasks", []):
                task["enableExecuteCommand"] = True
                for container in task.get("containers", []):
                    container.setdefault("runtimeId", f"{task['taskArn'].rsplit('/', 1)[-1]}-{container['name']}")
                    container["managedAgents"] = [{"name": "ExecuteCommandAgent", "lastStatus": "RUNNING"}]
            data = json.dumps(described).encode()
        self._reply(status, kind, data)

    def _reply(self, status: int, kind: str, data: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def ecs_proxy(aws_stack):
    proxy = EcsProxy(aws_stack["server"].url)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def test_make_exec_runs_the_aws_cli_which_calls_execute_command_and_the_plugin(aws_stack, ecs_proxy, tmp_path):
    calls = tmp_path / "plugin-calls.jsonl"
    plugin = tmp_path / "bin" / "session-manager-plugin"
    plugin.parent.mkdir()
    plugin.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    plugin.chmod(0o755)
    env = {
        **aws_stack["env"],
        "AWS_ENDPOINT_URL": ecs_proxy.url,  # the verb's boto3 and the CLI both read it
        "PATH": f"{plugin.parent}{os.pathsep}{os.environ['PATH']}",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    result = run_verb(env, "exec", "--node", "worker-2", "--command", "nvidia-smi -L", timeout=60)
    assert result.returncode == 0, result.stderr

    # First the verb's own lookup through the adapter, then the CLI: ExecuteCommand with what the verb
    # decided, and DescribeTasks for the container's runtime id.
    assert [op for op, _ in ecs_proxy.calls] == ["ListTasks", "DescribeTasks", "ExecuteCommand", "DescribeTasks"]
    assert ecs_proxy.agents[0].startswith("Boto3/")
    assert ecs_proxy.agents[2].startswith(f"aws-cli/{version('awscli')} ")  # the CLI `make setup` pins
    worker_2 = _workers_in_moto_order(aws_stack)[1]  # moto sets no startedAt: the verb keeps this order
    cluster = aws_stack["outputs"]["cluster_name"]
    assert ecs_proxy.calls[2][1] == {
        "cluster": cluster,
        "task": worker_2,
        "container": "ray-worker",
        "interactive": True,
        "command": "nvidia-smi -L",
    }
    # The plugin: first the CLI's bare presence check, then the session for the ECS target.
    probe, session = (json.loads(line) for line in calls.read_text().splitlines())
    task_id = worker_2.rsplit("/", 1)[-1]
    assert probe == []
    assert session == [
        json.dumps(SESSION),
        "us-east-1",
        "StartSession",
        "",
        json.dumps({"Target": f"ecs:{cluster}_{task_id}_{task_id}-ray-worker"}),
        ecs_proxy.url,
    ]


def _workers_in_moto_order(stack) -> list[str]:
    ecs, out = stack["server"].client("ecs"), stack["outputs"]
    arns = ecs.list_tasks(cluster=out["cluster_name"], desiredStatus="RUNNING")["taskArns"]
    tasks = ecs.describe_tasks(cluster=out["cluster_name"], tasks=arns)["tasks"]
    return [
        t["taskArn"] for t in tasks if t.get("group") == f"service:{out['worker_groups']['default']['service_name']}"
    ]


def test_without_the_plugin_the_cli_is_not_run(aws_stack, ecs_proxy, tmp_path):
    env = {**aws_stack["env"], "AWS_ENDPOINT_URL": ecs_proxy.url, "PATH": str(tmp_path)}
    result = run_verb(env, "exec", "--node", "head", timeout=60)
    assert result.returncode == 1 and result.stderr.startswith("error: the Session Manager plugin is not installed")
    assert ecs_proxy.calls == []  # refused before any AWS call, and the CLI never ran
