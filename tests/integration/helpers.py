"""What the integration tests share besides fixtures: the test cluster's ports, a restartable moto_server,
and the job and verb commands run as real subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from rayfleet.local import cluster as local_cluster

REPO = Path(__file__).resolve().parents[2]
# RAYFLEET_TEST_RAY_PORT/_DASHBOARD_PORT: a second test session beside one already running (its own cluster)
RAY_PORT = int(os.environ.get("RAYFLEET_TEST_RAY_PORT", "6490"))
DASHBOARD_PORT = int(os.environ.get("RAYFLEET_TEST_DASHBOARD_PORT", "8365"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class MotoServer:
    """A real `moto_server` process on 127.0.0.1 that a test can stop and start again on the same port.

    IAM: `enforce(spec)` (or tools.moto_stack.stack.create) makes the deployment's identities and turns moto's
    IAM enforcement on (tools/moto_stack/iam.py); `reset` wipes IAM with everything else and makes them again
    (new keys). `as_identity(name)` is the AWS_* env of one of them: "operator" for the verbs, "task" for a
    job, "control" for the control task; `inspector(service)` is the tests' own all-allowed client."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.clients: dict[tuple, object] = {}
        self.identities: dict | None = None
        self.iam_spec = None  # what `enforce` made: made again after every reset
        _SERVERS[self.url] = self

    def command(self) -> list[str]:
        # moto_server with S3's DeleteObjects authorized per key, as AWS does (tools/moto_stack/s3.py)
        return [sys.executable, "-m", "tools.moto_stack.s3", "-H", "127.0.0.1", "-p", str(self.port)]

    def start(self) -> MotoServer:
        self.proc = subprocess.Popen(self.command(), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(self.url, timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("moto_server did not start") from None
                time.sleep(0.2)
        if self.iam_spec is not None:  # a restart forgets IAM, as a reset does
            self.identities = None
            self.enforce(self.iam_spec)
        return self

    def enforce(self, spec) -> dict:
        """Make `spec`'s identities (tools.moto_stack.iam.Spec) and turn IAM enforcement on."""
        from tools.moto_stack import iam

        return iam.enforce(self, spec)

    def reset(self) -> MotoServer:
        """Empty every service's store, as a fresh server would start (moto's own reset endpoint); IAM is made
        again and enforced (new keys: take envs after the reset)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.start()
        from tools.moto_stack import iam

        iam.set_enforcement(self.url, on=False)
        urllib.request.urlopen(urllib.request.Request(f"{self.url}/moto-api/reset", method="POST"), timeout=30).close()
        self.identities, self.clients = None, {}
        if self.iam_spec is not None:
            self.enforce(self.iam_spec)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def as_identity(self, name: str) -> dict[str, str]:
        """The AWS_* credentials of one of the deployment's identities ("testing" while IAM is not enforced)."""
        if not self.identities:
            return dict(TEST_CREDENTIALS)
        # moto checks a signature over the body it decompressed: botocore's gzip of a large PutMetricData
        # would never match (SignatureDoesNotMatch), so the processes that sign for moto send it plain.
        plain = {"AWS_DISABLE_REQUEST_COMPRESSION": "true"}
        return {"AWS_SESSION_TOKEN": "", **plain, **self.identities[name].env()}

    def inspector(self, service: str):
        """The tests' own client, all allowed (what the console shows the account's root): a test inspecting or
        arranging moto's state uses it, never a product call. One per service (making one costs 0.5-1 s of CPU,
        and tests poll through these)."""
        credentials = self.as_identity("inspector")
        key = (service, credentials["AWS_ACCESS_KEY_ID"])
        if key not in self.clients:
            self.clients[key] = self._client(service, credentials)
        return self.clients[key]

    client = inspector  # the name the older tests use: the same all-allowed inspector

    def client_as(self, service: str, identity: str):
        """A client with one identity's credentials (for a test's call made as the operator, a job ...)."""
        return self._client(service, self.as_identity(identity))

    def _client(self, service: str, credentials: dict):
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials.get("AWS_SESSION_TOKEN") or None,
            config=Config(disable_request_compression=True),  # see as_identity
        )


TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
_SERVERS: dict[str, MotoServer] = {}  # url -> server: verbs_env finds the operator's keys of an endpoint


def inspector_at(endpoint: str, service: str):
    """The all-allowed inspector's client of the session's moto server at `endpoint` (MotoServer.inspector)."""
    return _SERVERS[endpoint].inspector(service)


def identity_env(endpoint: str, identity: str) -> dict[str, str]:
    """The AWS_* credentials of `identity` at the moto server at `endpoint` ("testing" where none enforces)."""
    server = _SERVERS.get(endpoint)
    return server.as_identity(identity) if server is not None else dict(TEST_CREDENTIALS)


class EcsMotoServer(MotoServer):
    """A MotoServer running moto_server with the ECS behaviours a rendered deployment depends on
    (tools/moto_stack/ecs.py): what tools.moto_stack.stack.create needs."""

    places_like_ecs = True

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tools.moto_stack.ecs", "-H", "127.0.0.1", "-p", str(self.port)]


def run_ddp(env: dict, *overrides: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rayfleet.train.ddp", *overrides],
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


def run_verb(env: dict, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`rayfleet ARGS ...`, the one front door, as the operator runs it."""
    return subprocess.run(
        [sys.executable, "-m", "rayfleet.cli.main", *args],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,  # no terminal: a verb that would ask refuses instead
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def s3_run_dir(env: dict, bucket: str, run: str):
    """A run's RunDir in the stack's bucket, reached through the AWS adapter with the verbs' environment
    (endpoint, test credentials, region) while the block runs."""
    from unittest import mock

    from rayfleet.core.run_dir import RunDir

    keys = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
    with mock.patch.dict(os.environ, {k: env[k] for k in keys if k in env}):
        yield RunDir(f"s3://{bucket}/runs", run)


def run_record(env: dict, bucket: str, run: str, **owner_writes) -> dict:
    """A run's record as every verb reads it (RunDir.record: run.json and the events sent since). With fields:
    first written as the record's owner writes them (RunDir.update: what the trainer's driver does)."""
    with s3_run_dir(env, bucket, run) as run_dir:
        return run_dir.update(**owner_writes) if owner_writes else run_dir.record()


def keep_asking_to_stop(env: dict, bucket: str, run: str, reason: str) -> None:
    """The checkpoint-first stop request a budget makes (core/stop_request.py), in the run's S3 folder, made again
    if it is gone: a resubmission clears it before its new attempt (recipes/job.py)."""
    from rayfleet.core import stop_request

    with s3_run_dir(env, bucket, run) as run_dir:
        if stop_request.requested(run_dir) is None:
            stop_request.request(run_dir, reason)


def verbs_env(endpoint: str, outputs_file: str, region: str, *, identity: str = "operator", **extra: str) -> dict:
    """The environment that points the verbs at a moto stack: its endpoint, the operator's credentials (the
    verbs run on the laptop as the operator; `identity` another: "task" for a job, "control" for the control
    task's code), the outputs."""
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_SESSION_TOKEN")}
    return {
        **env,
        "AWS_ENDPOINT_URL": endpoint,
        **identity_env(endpoint, identity),
        "AWS_DEFAULT_REGION": region,
        "RAYFLEET_OUTPUTS": outputs_file,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


# Run in a fresh process because Ray reads RAY_AUTH_MODE once per process, at import, and the test
# process may have imported ray (through another test) before any token was in its environment.
_JOBS_API_CALL = """
import sys
from rayfleet.recipes import jobs_api
client = jobs_api.client_for(sys.argv[1])
answer = getattr(client, sys.argv[2])(*sys.argv[3:])
print(answer if isinstance(answer, str) else repr(answer))
"""


def jobs_api_call(env: dict, method: str, *args: str) -> str:
    """What the test cluster's Jobs API answers to `method(*args)`, asked with the token in `env`."""
    result = subprocess.run(
        [sys.executable, "-c", _JOBS_API_CALL, f"http://127.0.0.1:{DASHBOARD_PORT}", method, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"Jobs API {method}{args}: {result.stderr[-2000:]}"
    return result.stdout.strip()


def left_running(run: str) -> list[int]:
    """Processes (of any job) whose environment names this run: the launchers and the script's ranks."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"RAYFLEET_RUN_NAME={run}".encode() in (proc / "environ").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def still_running_after(run: str, timeout_s: float = 120) -> list[str]:
    """The run's processes (left_running) still there `timeout_s` after the run ended, each with its command
    line; [] as soon as none is. The follower returns once Ray reports the job ended, and Ray ends the job's
    last processes (its supervisor, killed actors' workers) just after: a leaked one is still there long after."""
    deadline = time.monotonic() + timeout_s
    while left_running(run) and time.monotonic() < deadline:
        time.sleep(0.5)
    described = []
    for pid in left_running(run):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        described.append(f"{pid}: {command[:300]}")
    return described


def listed_nodes(env: dict) -> list[dict]:
    """`ray list nodes --detail` of the test cluster, dead ones included, asked in a subprocess: Ray reads
    RAY_AUTH_MODE once per process."""
    ray, dashboard = str(Path(sys.executable).parent / "ray"), f"--address=http://127.0.0.1:{DASHBOARD_PORT}"
    listed = subprocess.run(
        [ray, "list", "nodes", "--format=json", "--detail", dashboard],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    return json.loads(listed.stdout)


def worker_node_ids(env: dict) -> set[str]:
    """The cluster's alive non-head nodes."""
    return {n["node_id"] for n in listed_nodes(env) if n["state"] == "ALIVE" and not n["is_head_node"]}


FSDP_TINY = "rayfleet/train/configs/fsdp-tiny.yaml"
# The session's FSDP run and its uninterrupted twin share these settings (same schedule, same numbers). fp32:
# precision=auto picks bf16 on a CPU with AVX512-BF16/AMX, and the checks below (shard bytes, the export's
# 1e-5 logits) are fp32's; bf16 has its own run (test_bf16_mixed_precision_and_per_block_compile).
FSDP_LEARN = ("max_steps=30", "checkpoint_every=10", "log_every=10", "precision=fp32")


def run_fsdp(env, tiny, storage, *overrides, timeout=600):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "rayfleet.train.fsdp",
            "--config",
            FSDP_TINY,
            f"model={tiny['model']}",
            f"data={tiny['data']}",
            f"storage={storage}",
            *overrides,
        ],
        env={**env, "HF_HUB_OFFLINE": "1"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ctrl_c_reaches_it() -> None:
    """A Popen preexec_fn for a process a test stops with Ctrl-C: a shell leaves SIGINT ignored for what it
    starts in the background (a CI run under nohup), Python then keeps ignoring it, and the Ctrl-C never
    arrives. As from a terminal, the child gets the default (Python's KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def ctrl_c_on_failure(proc: subprocess.Popen):
    """For a run verb a test stops with Ctrl-C: if the test fails before, Ctrl-C it anyway (then kill it), so
    its job does not hold the session cluster's workers while the next tests wait for them."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


class Lines:
    """A process's output stream read in a thread, line by line: a test waits for a line with a deadline
    (instead of sleeping and hoping the process got there), then takes all of it once the stream ends."""

    def __init__(self, stream):
        self.lines: list[str] = []
        self.ended = False
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    def count(self, text: str) -> int:
        with self.changed:
            return sum(text in line for line in self.lines)

    def wait_for(self, text: str, timeout: float, count: int = 1) -> None:
        """Until `count` lines (in all) contain `text`; fails naming it if the stream ends or time runs out."""

        def seen() -> bool:
            return sum(text in line for line in self.lines) >= count

        with self.changed:
            self.changed.wait_for(lambda: seen() or self.ended, timeout)
            got = "".join(self.lines)[-3000:]
            assert seen(), f"{count} x {text!r} not printed within {timeout:.0f} s:\n{got}"

    def text(self, timeout: float = 60) -> str:
        """All of it, once the stream has ended (the process exited)."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end"
        return "".join(self.lines)


def control_environment(ecs, cluster: str, control_service: str) -> dict[str, str]:
    """The control task's environment as Terraform rendered it and the moto stack registered it."""
    service = ecs.describe_services(cluster=cluster, services=[control_service])["services"][0]
    definition = ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]
    return {e["name"]: e["value"] for e in definition["containerDefinitions"][0]["environment"]}
