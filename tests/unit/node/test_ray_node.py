"""The Ray images' entry point: ray start flags from the task's environment, resources capped by the
container's limits, the bounded wait for the head, and jobs by name."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import pytest

from rayfleet.core.warm_workers import PRELOAD_ENV, SOCKET_ENV
from rayfleet.node import head_wait, node_spec, ray_node

REPO = Path(__file__).resolve().parents[3]
PORTS = json.loads((Path(__file__).resolve().parents[3] / "infra" / "catalog" / "ray_ports.json").read_text())
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def no_fork_server(monkeypatch, request):
    """main() starts the node's fork server first (a real one preloads torch): these tests' nodes are fakes.
    test_every_node_starts_its_fork_server_first_and_stops_it_last starts a real one."""
    if request.node.name != "test_every_node_starts_its_fork_server_first_and_stops_it_last":
        monkeypatch.setattr(ray_node, "warm_server_beside", lambda env: nullcontext({**env, SOCKET_ENV: "/none"}))


def test_every_node_starts_its_fork_server_first_and_stops_it_last(monkeypatch):
    seen = {}

    def head(env):  # the node runs while its fork server listens
        sock = Path(env[SOCKET_ENV])  # the head's Ray gets its socket; a private folder holds it
        wait_until(sock.exists, timeout=60)
        seen["sock"] = sock
        seen["server"] = [p for p in Path("/proc").iterdir() if p.name.isdigit() and str(sock).encode() in _cmdline(p)]
        return 0

    monkeypatch.setattr(ray_node, "run_head", head)
    env = {"RAY_AUTH_MODE": "token", PRELOAD_ENV: "json", "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}
    assert ray_node.main(["head"], env=env) == 0
    sock, server = seen["sock"], seen["server"]
    assert sock.name == "node.sock" and sock.parent.stat().st_mode & 0o777 == 0o700 and len(server) == 1
    wait_until(lambda: not (server[0] / "cmdline").exists() or not _cmdline(server[0]), timeout=60)  # stopped


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_every_port_the_security_group_opens_is_pinned_on_ray_start():
    env = {"RAYFLEET_RAY_PORTS": json.dumps(PORTS), "RAYFLEET_OBJECT_STORE_MIB": "100"}
    command = node_spec.head_command(env)
    joined = " ".join(command)
    for name, span in PORTS.items():
        if name == "collectives":
            continue  # NCCL and torch's TCPStore pick ephemeral ports; the group opens that range
        assert str(span["from"]) in joined, name
    assert "--head" in command and "--num-cpus=0" in command and "--num-gpus=0" in command
    assert "--dashboard-host=0.0.0.0" in command and "--block" in command
    assert not any(flag.startswith("--redis-password") for flag in command)  # no store: the GCS in memory


def test_a_head_with_a_gcs_store_authenticates_to_it_and_no_other_node_gets_the_token():
    env = {
        "RAYFLEET_RAY_PORTS": json.dumps(PORTS),
        "RAYFLEET_OBJECT_STORE_MIB": "100",
        "RAYFLEET_GCS_STORE_PASSWORD": "s3cret",
    }
    assert "--redis-password=s3cret" in node_spec.head_command(env)
    for driver_only in (False, True):
        assert "s3cret" not in " ".join(node_spec.join_command(env, "head.x", block=True, driver_only=driver_only))


def test_resources_are_capped_by_cgroup_limits_and_shm(tmp_path):
    (tmp_path / "cpu.max").write_text("200000 100000\n")  # 2 CPUs
    (tmp_path / "memory.max").write_text(str(8 * 1024 * MIB))
    env = {"RAYFLEET_NUM_CPUS": "48", "RAYFLEET_NUM_GPUS": "4", "RAYFLEET_OBJECT_STORE_MIB": str(10**7)}
    res = node_spec.resources(env, cgroup=tmp_path)
    assert res["num_cpus"] == 2 and res["num_gpus"] == 4
    assert res["object_store_memory"] <= node_spec.shm_bytes() - 64 * MIB  # never more than /dev/shm holds
    assert res["memory"] <= 8 * 1024 * MIB - res["object_store_memory"]


def test_unlimited_cgroups_leave_the_request_alone(tmp_path):
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    res = node_spec.resources({"RAYFLEET_NUM_CPUS": "3", "NVIDIA_VISIBLE_DEVICES": "0,1"}, cgroup=tmp_path)
    assert res["num_cpus"] == 3 and res["num_gpus"] == 2 and "memory" not in res


def test_the_wait_ends_when_the_head_starts_listening(fake_ray, monkeypatch):
    """The head starts listening only after the wait has found it absent and said so; the wait goes on until it
    answers."""
    monkeypatch.setenv("PATH", f"{fake_ray['bin']}:{os.environ['PATH']}")  # its health check passes
    monkeypatch.setenv("FAKE_RAY_LOG", str(fake_ray["log"]))
    said, absent = [], threading.Event()

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("waiting for the head"):
            absent.set()

    monkeypatch.setattr(head_wait, "say", say)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def late_head():
        if absent.wait(20):
            server.bind(("127.0.0.1", port))
            server.listen()

    threading.Thread(target=late_head, daemon=True).start()
    try:
        assert head_wait.wait_for_head("localhost", port, timeout=20, interval=0.2) == "127.0.0.1"
    finally:
        server.close()
    assert said[0].startswith(f"waiting for the head localhost:{port}") and len(said) == 2, said
    assert said[1].startswith(f"head localhost:{port} (127.0.0.1) answers after"), said


def test_the_wait_is_bounded_with_a_clear_error(monkeypatch):
    """Tried every `interval` until `timeout` has passed on its clock (a fake one: it moves as the wait sleeps),
    then one clear error: five tries in 1 s at 0.25 s, none after."""
    now, tried = [0.0], []
    clock = SimpleNamespace(monotonic=lambda: now[0], sleep=lambda s: now.__setitem__(0, now[0] + s))
    monkeypatch.setattr(head_wait, "time", clock)
    resolve = head_wait.resolve
    monkeypatch.setattr(head_wait, "resolve", lambda *a: (tried.append(now[0]), resolve(*a))[1])
    with pytest.raises(SystemExit) as exc:
        head_wait.wait_for_head("head.rayfleet-test.invalid", 6379, timeout=1, interval=0.25)
    assert tried == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert "did not answer within 1s" in str(exc.value) and "rayfleet status" in str(exc.value)


def test_jobs_by_name_or_module_and_a_driver_that_offers_nothing():
    assert ray_node.job_command("ddp", ["epochs=1"])[1:] == ["-m", "rayfleet.train.ddp", "epochs=1"]
    assert ray_node.job_command("fsdp", [])[1:] == ["-m", "rayfleet.train.fsdp"]
    assert ray_node.job_command("my_pkg.train", ["x=1"])[1:] == ["-m", "my_pkg.train", "x=1"]
    command = node_spec.join_command({"RAYFLEET_NUM_GPUS": "8"}, "10.0.0.5", block=False, driver_only=True)
    assert "--address=10.0.0.5:6379" in command and "--num-gpus=0" in command and "--num-cpus=0" in command


def test_a_worker_node_carries_its_tasks_group_label_and_the_trainer_none():
    """The worker task's RAYFLEET_WORKER_GROUP (Terraform sets it) becomes the node's Ray label; the trainer's
    driver-only node offers nothing to place on, so it carries no group."""
    env = {"RAYFLEET_WORKER_GROUP": "default"}
    assert "--labels=rayfleet.io/group=default" in node_spec.join_command(env, "10.0.0.5", block=True)
    assert not [c for c in node_spec.join_command(env, "10.0.0.5", False, True) if c.startswith("--labels")]
    assert not [c for c in node_spec.join_command({}, "10.0.0.5", block=True) if c.startswith("--labels")]


def test_a_recipe_driver_pins_the_jobs_entrypoint_to_its_own_node(monkeypatch):
    assert ray_node.job_command("recipe", [])[1:] == ["-m", "rayfleet.node.driver.recipe"]
    env = {"HOSTNAME": "ip-10-0-1-7"}
    command = node_spec.join_command(env, "10.0.0.5", block=False, driver_only=True)
    assert '--resources={"rayfleet_trainer_ip-10-0-1-7": 1}' in command  # only this trainer offers it
    assert not [c for c in node_spec.join_command(env, "10.0.0.5", block=True) if c.startswith("--resources")]
    seen = {}

    def fake_run(cmd, env=None, check=False):
        seen.setdefault("calls", []).append((cmd, env))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(ray_node, "wait_for_head", lambda host, port, timeout: "10.0.0.5")
    monkeypatch.setattr(ray_node.subprocess, "run", fake_run)
    monkeypatch.setattr(ray_node, "run_driver", lambda cmd, env: fake_run(cmd, env).returncode)
    task_env = {"RAY_AUTH_MODE": "token", "RAYFLEET_HEAD_HOST": "head.rf.local", "HOSTNAME": "ip-10-0-1-7"}
    assert ray_node.main(["driver", "recipe"], env=task_env) == 0
    job_cmd, job_env = seen["calls"][1]
    assert job_cmd[1:] == ["-m", "rayfleet.node.driver.recipe"]
    # the head by its name, never the IP it has now: a head replaced on its GCS store comes back on another
    assert "--address=head.rf.local:6379" in seen["calls"][0][0]
    assert job_env["RAYFLEET_DASHBOARD_URL"] == "http://head.rf.local:8265"
    assert job_env["RAYFLEET_TRAINER_RESOURCE"] == "rayfleet_trainer_ip-10-0-1-7"
    assert job_env["RAY_ADDRESS"] == "head.rf.local:6379"


def test_a_queued_recipe_run_whose_head_went_away_rejoins_the_new_head_and_runs_its_driver_again(monkeypatch):
    """The recipe driver's EXIT_HEAD_LOST (the run was still queued): the trainer waits for the head's name to
    answer again, rejoins it by that name and runs the driver again; any other code is the task's."""
    from rayfleet.core.errors import EXIT_HEAD_LOST

    heads, codes, joined, drivers = iter(["10.0.0.5", "10.0.0.9"]), iter([EXIT_HEAD_LOST, 0]), [], []

    def fake_run(cmd, env=None, check=False):
        if cmd[:2] == ["ray", "start"]:
            joined.append(next(c for c in cmd if c.startswith("--address=")))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(ray_node, "wait_for_head", lambda host, port, timeout: next(heads))
    monkeypatch.setattr(ray_node.subprocess, "run", fake_run)
    monkeypatch.setattr(ray_node, "run_driver", lambda cmd, env: drivers.append(env["RAY_ADDRESS"]) or next(codes))
    task_env = {"RAY_AUTH_MODE": "token", "RAYFLEET_HEAD_HOST": "head.rf.local", "HOSTNAME": "ip-10-0-1-7"}
    assert ray_node.main(["driver", "recipe"], env=task_env) == 0
    assert next(heads, None) is None  # it waited for the name to answer before each join
    assert joined == ["--address=head.rf.local:6379"] * 2 and drivers == ["head.rf.local:6379"] * 2
    always_lost = iter([EXIT_HEAD_LOST] * (ray_node.MAX_HEAD_LOSSES + 1))
    monkeypatch.setattr(ray_node, "wait_for_head", lambda host, port, timeout: "10.0.0.5")
    monkeypatch.setattr(ray_node, "run_driver", lambda cmd, env: next(always_lost))
    assert ray_node.main(["driver", "recipe"], env=task_env) == EXIT_HEAD_LOST  # bounded: the task then ends


def test_usage_and_missing_head_name(capsys):
    assert ray_node.main([], env={}) == 2
    with pytest.raises(SystemExit) as exc:
        ray_node.main(["worker"], env={"RAY_AUTH_MODE": "token"})
    assert "RAYFLEET_HEAD_HOST is not set" in str(exc.value)


# -- the node's life: graceful stops, a GCS that answers, a head that is replaced -------------------------

FAKE_RAY = """#!/usr/bin/env python3
# A stand-in `ray` for rayfleet-node: logs its arguments; `start --block` behaves as Ray's (a SIGTERM makes it
# exit 1; FAKE_RAY_DIE_TIMES first starts die at once, as when the raylet loses its GCS) and logs ["ready"] once
# its SIGTERM handler is in place; `health-check` exits FAKE_RAY_HEALTH with Ray's last line on stderr.
import json, os, signal, sys, time
log = os.environ["FAKE_RAY_LOG"]
with open(log, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
if sys.argv[1] == "health-check":
    code = int(os.environ.get("FAKE_RAY_HEALTH", "0"))
    if code:
        print("ray.exceptions.RpcError: Timed out while waiting for GCS to become available.", file=sys.stderr)
    sys.exit(code)
if sys.argv[1] == "start":
    starts = sum(1 for line in open(log) if line.startswith('["start"'))
    if starts <= int(os.environ.get("FAKE_RAY_DIE_TIMES", "0")):
        print("Some Ray subprocesses exited unexpectedly: raylet", flush=True)
        sys.exit(1)
    if "--block" not in sys.argv:  # the driver's node: Ray starts its processes and returns
        sys.exit(0)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # as Ray's own handler: exit 1 after cleaning up
    with open(log, "a") as f:
        f.write(json.dumps(["ready"]) + "\\n")
    print("ray started", flush=True)
    while True:
        time.sleep(0.1)
sys.exit(0)
"""


@pytest.fixture
def fake_ray(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ray").write_text(FAKE_RAY.replace("#!/usr/bin/env python3", f"#!{sys.executable}"))
    (bin_dir / "ray").chmod(0o755)
    return {"bin": bin_dir, "log": tmp_path / "ray.log"}


def ray_calls(fake) -> list[list[str]]:
    text = fake["log"].read_text() if fake["log"].exists() else ""
    return [json.loads(line) for line in text.splitlines()]


def node_process(fake, role: str, port: int, *args: str, **env) -> subprocess.Popen:
    full = {
        **os.environ,
        "PATH": f"{fake['bin']}:{os.environ['PATH']}",
        "FAKE_RAY_LOG": str(fake["log"]),
        "RAY_AUTH_MODE": "token",
        "RAYFLEET_HEAD_HOST": "localhost",
        "RAYFLEET_RAY_PORTS": json.dumps({"gcs": {"from": port, "to": port}, "dashboard": {"from": 1, "to": 1}}),
        "RAYFLEET_NUM_CPUS": "1",
        "PYTHONUNBUFFERED": "1",
        PRELOAD_ENV: "json",  # its fork server: a real one, preloading nothing heavy
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "rayfleet.node.ray_node", role, *args],
        cwd=Path(__file__).resolve().parents[3],
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_until(predicate, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("role", ["head", "worker"])
def test_a_graceful_stop_exits_0(fake_ray, listening_port, role):
    """ECS stops a task with SIGTERM; `ray start --block` then exits 1, which must not read as a failure."""
    node = node_process(fake_ray, role, listening_port)
    try:
        wait_until(lambda: ["ready"] in ray_calls(fake_ray))  # `ray start` has its handler
        node.send_signal(signal.SIGTERM)
        output, _ = node.communicate(timeout=30)
    finally:
        node.kill()
    assert node.returncode == 0, output


STOPPABLE_JOB = """
import os, pathlib, signal, sys, time
def stop(signum, frame):  # as rayfleet.node.driver.recipe does: stop the Ray job, record STOPPED, exit 143
    pathlib.Path(os.environ["JOB_MARK"]).write_text("stopped")
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
print("job running", flush=True)
time.sleep(60)
"""


def test_a_stopped_trainer_task_passes_sigterm_to_its_job(fake_ray, listening_port, tmp_path):
    """ECS stops the trainer task with SIGTERM: the job (the recipe driver) must get it, to stop its Ray job and
    record STOPPED, and its exit code is the task's."""
    (tmp_path / "stoppable_job.py").write_text(STOPPABLE_JOB)
    mark = tmp_path / "mark"
    env = {"PYTHONPATH": str(tmp_path), "JOB_MARK": str(mark)}
    node = node_process(fake_ray, "driver", listening_port, "stoppable_job", **env)
    try:
        output = ""
        for line in node.stdout:
            output += line
            if "job running" in line:
                break
        node.send_signal(signal.SIGTERM)
        rest, _ = node.communicate(timeout=30)
    finally:
        node.kill()
    assert mark.read_text() == "stopped", output + rest
    assert node.returncode == 143, output + rest
    assert ["stop"] in ray_calls(fake_ray)  # the driver's node leaves the cluster


def test_the_wait_needs_the_gcs_to_answer_not_just_an_open_port(fake_ray, listening_port, monkeypatch, capsys):
    """Something listens on the GCS port but Ray's health check fails: that is not a head yet."""
    monkeypatch.setenv("PATH", f"{fake_ray['bin']}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_RAY_LOG", str(fake_ray["log"]))
    monkeypatch.setenv("FAKE_RAY_HEALTH", "1")
    with pytest.raises(SystemExit) as exc:
        head_wait.wait_for_head("localhost", listening_port, timeout=2, interval=0.2)
    assert "Timed out while waiting for GCS" in str(exc.value)
    assert ["health-check", "--address", f"127.0.0.1:{listening_port}"] in ray_calls(fake_ray)


def test_a_worker_whose_ray_exits_resolves_the_head_again_and_rejoins_in_the_same_container(fake_ray, listening_port):
    """The raylet dies when its head is gone (GCS unreachable past gcs_rpc_server_reconnect_timeout_s): the
    worker waits for the head's name to answer again and starts Ray again, without the task restarting."""
    node = node_process(fake_ray, "worker", listening_port, FAKE_RAY_DIE_TIMES="2")
    try:
        wait_until(lambda: sum(c[0] == "start" for c in ray_calls(fake_ray)) == 3, timeout=60)
        wait_until(lambda: ["ready"] in ray_calls(fake_ray))  # the third start has its handler
        assert node.poll() is None  # the container is still the same one
        node.send_signal(signal.SIGTERM)
        output, _ = node.communicate(timeout=30)
    finally:
        node.kill()
    assert node.returncode == 0, output
    calls = ray_calls(fake_ray)
    starts = [c for c in calls if c[0] == "start"]
    assert all(f"--address=localhost:{listening_port}" in s for s in starts)  # the name, resolved by each start
    checks = [i for i, c in enumerate(calls) if c[0] == "health-check"]
    start_at = [i for i, c in enumerate(calls) if c[0] == "start"]
    assert all(
        any(i < s for i in checks if i > p) for p, s in zip([-1, *start_at[:-1]], start_at, strict=True)
    )  # a check before each
    assert output.count("resolving localhost again") == 2, output


def test_a_worker_follows_the_heads_name_to_a_new_address(monkeypatch):
    """A replaced head answers at a new address while the old raylet still waits for the old one: the
    worker leaves at once and joins the new head, instead of waiting out Ray's reconnect timeout."""
    answers = iter(["10.0.0.5", "10.0.0.5", "10.0.0.9"])
    monkeypatch.setattr(head_wait, "resolve", lambda host, port: next(answers, "10.0.0.9"))
    monkeypatch.setattr(head_wait, "gcs_problem", lambda address, port, timeout=30: None)
    assert head_wait.head_moved("head.rf.local", 6379, "10.0.0.5") is None
    assert head_wait.head_moved("head.rf.local", 6379, "10.0.0.5") is None
    assert head_wait.head_moved("head.rf.local", 6379, "10.0.0.5") == "10.0.0.9"
    monkeypatch.setattr(head_wait, "gcs_problem", lambda address, port, timeout=30: "not yet")
    assert head_wait.head_moved("head.rf.local", 6379, "10.0.0.5") is None  # the new head must answer first


def test_the_heads_ray_processes_inherit_no_store_token_and_the_log_never_shows_it(monkeypatch, capsys):
    """Issue 54 R5: `ray start` gets the store's token on its command line (Ray needs it there); the environment
    it starts with, which every Ray process on the head (a job's actors there included) inherits, does not
    carry it, and the logged command line masks it."""
    started = []

    class Exited:
        returncode = 0

        def __init__(self, command, env=None):
            started.append((command, env))

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(ray_node.subprocess, "Popen", Exited)
    monkeypatch.setattr(ray_node.Node, "install", lambda self: None)
    env = {
        "RAYFLEET_RAY_PORTS": json.dumps(PORTS),
        "RAYFLEET_OBJECT_STORE_MIB": "100",
        "RAYFLEET_GCS_STORE_PASSWORD": "s3cret-store-token",
        "RAY_AUTH_TOKEN": "ray-token",
    }
    assert ray_node.run_head(env) == 0
    (command, child_env), *_ = started
    assert "--redis-password=s3cret-store-token" in command
    assert child_env is not None and "RAYFLEET_GCS_STORE_PASSWORD" not in child_env
    assert "s3cret-store-token" not in json.dumps(child_env) and child_env["RAY_AUTH_TOKEN"] == "ray-token"
    assert "s3cret-store-token" not in capsys.readouterr().out
