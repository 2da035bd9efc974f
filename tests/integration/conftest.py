"""A real local Ray cluster (head + 2 workers, token auth) and a real moto S3 server, for the session.

Both use their own ports, state directory and token file, so a developer's own `make cluster-up` on the
default ports is left alone. Jobs run as real driver subprocesses (`python -m training.ddp`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from scripts import local_cluster, ray_auth

REPO = Path(__file__).resolve().parents[2]
RAY_PORT, DASHBOARD_PORT = 6490, 8365


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def cluster_env(tmp_path_factory, aws_stack) -> dict:
    base = tmp_path_factory.mktemp("cluster")
    token = ray_auth.ensure_token(base / "token")
    env = {
        **os.environ,
        "RAYFLEET_STATE_DIR": str(base / "state"),
        "RAYFLEET_RAY_TOKEN_FILE": str(token),
        "RAYFLEET_RAY_PORT": str(RAY_PORT),
        "RAYFLEET_DASHBOARD_PORT": str(DASHBOARD_PORT),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        # moto accepts any credentials; the worker nodes read them from their own environment.
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        # S3 only (not ECS or CloudWatch): Ray's runtime-env agents fetch a recipe's code zip from the moto
        # bucket the way ECS nodes fetch it from the results bucket. Jobs name their own endpoint otherwise.
        "AWS_ENDPOINT_URL_S3": aws_stack["server"].url,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_TOKEN", None)
    cli = [sys.executable, "-m", "scripts.local_cluster"]
    subprocess.run([*cli, "up", "--workers", "2", "--cpus-per-worker", "1"], env=env, cwd=REPO, check=True)
    try:
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{RAY_PORT}"}
    finally:
        subprocess.run([*cli, "down"], env=env, cwd=REPO, check=False)


class MotoServer:
    """A real `moto_server` process on 127.0.0.1 that a test can stop and start again on the same port."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> MotoServer:
        moto = Path(sys.executable).parent / "moto_server"
        self.proc = subprocess.Popen(
            [str(moto), "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=1)
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def client(self, service: str):
        import boto3

        return boto3.client(
            service, endpoint_url=self.url, region_name="us-east-1",
            aws_access_key_id="testing", aws_secret_access_key="testing",
        )  # fmt: skip


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    server = MotoServer().start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def moto() -> MotoServer:
    """A moto server of the test's own, stoppable and restartable."""
    server = MotoServer().start()
    try:
        yield server
    finally:
        server.stop()


def run_ddp(env: dict, *overrides: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training.ddp", *overrides],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def train_worker_pids(env: dict) -> list[int]:
    """The Ray Train worker processes of the test cluster."""
    state_file = Path(env["RAYFLEET_STATE_DIR"]) / "cluster" / "state.json"
    state = local_cluster.ClusterState(**json.loads(state_file.read_text()))
    pids = []
    for pid in local_cluster.find_cluster_pids(state.cluster_id, state.pids):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::RayTrainWorker"):
                pids.append(pid)
        except OSError:
            continue
    return pids


@pytest.fixture(scope="session")
def aws_stack(tmp_path_factory):
    """A moto server holding what `make deploy` creates, and the env that points the verbs at it."""
    from tests.integration import aws_stack as stack

    server = MotoServer().start()
    directory = tmp_path_factory.mktemp("aws")
    outputs = stack.create(server, directory)
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": server.url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": stack.REGION,
        "RAYFLEET_OUTPUTS": outputs["outputs_file"],
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("AWS_PROFILE", None)
    try:
        yield {"server": server, "outputs": outputs, "env": env}
    finally:
        server.stop()


def run_verb(env: dict, verb: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"scripts.{verb}", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
