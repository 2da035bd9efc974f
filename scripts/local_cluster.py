"""A real local Ray cluster shaped like the ECS one: a head that trains nothing, N worker nodes.

    python -m scripts.local_cluster up [--workers 2] [--cpus-per-worker 1]   # make cluster-up
    python -m scripts.local_cluster status                                   # make cluster-status
    python -m scripts.local_cluster down                                     # make cluster-down

Every node is a separate `ray start --block` process in its own session, started with
`RAY_AUTH_MODE=token` and the machine's token file (scripts/ray_auth.py). Every process the cluster
starts carries `RAYFLEET_CLUSTER_ID` in its environment; `down` stops exactly those processes (SIGTERM,
then SIGKILL after a grace period), so it never touches another Ray on the machine and still works when
the state file outlives a crash.

Ports: the head's GCS listens on RAYFLEET_RAY_PORT (6390); each node gets its own block of ports above it
(below Ray's worker-port range 10002-19999). Nodes start one after another: two raylets that start in the
same instant pick the same socket name and one of them dies.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from scripts import ray_auth

ray_auth.use_token_auth()  # before anything imports ray: Ray reads its auth mode once, at import

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 90
STOP_GRACE_S = 10
READY_MARK = "will now block forever"
DEFAULT_OBJECT_STORE_BYTES = 256 * 1024**2


class ClusterError(RuntimeError):
    """Something the user can fix; the message says what and how."""


@dataclass
class ClusterSpec:
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: int = 0
    port: int = 6390
    dashboard_port: int = 8265
    object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES

    @classmethod
    def from_env(cls, **overrides) -> ClusterSpec:
        spec = cls(
            port=int(os.environ.get("RAYFLEET_RAY_PORT", 6390)),
            dashboard_port=int(os.environ.get("RAYFLEET_DASHBOARD_PORT", 8265)),
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(spec, key, value)
        spec.validate()
        return spec

    def validate(self) -> None:
        if self.workers < 1:
            raise ClusterError(f"workers must be at least 1, got {self.workers}")
        if self.cpus_per_worker <= 0:
            raise ClusterError(f"cpus_per_worker must be positive, got {self.cpus_per_worker}")
        if not 1024 <= self.port <= 9000:
            raise ClusterError(f"RAYFLEET_RAY_PORT must be in 1024..9000, got {self.port}")
        if self.workers > 50:
            raise ClusterError(f"at most 50 local workers, got {self.workers}")


@dataclass
class ClusterState:
    cluster_id: str
    address: str
    dashboard_url: str
    temp_dir: str
    log_dir: str
    spec: dict
    pids: list[int] = field(default_factory=list)


def state_dir() -> Path:
    return Path(os.environ.get("RAYFLEET_STATE_DIR") or REPO / ".rayfleet") / "cluster"


def state_file() -> Path:
    return state_dir() / "state.json"


def load_state() -> ClusterState | None:
    path = state_file()
    if not path.exists():
        return None
    return ClusterState(**json.loads(path.read_text()))


def node_env(cluster_id: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(ray_auth.auth_env())
    env.pop("RAY_AUTH_TOKEN", None)  # the file only: a token in the environment leaks into /proc
    env.pop("RAY_ADDRESS", None)
    env["RAYFLEET_CLUSTER_ID"] = cluster_id
    # Train workers import `training` from this checkout (on ECS the image has it installed).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _head_args(spec: ClusterSpec, temp_dir: str) -> list[str]:
    p = spec.port
    return [
        "--head", "--num-cpus=0", "--num-gpus=0",  # like ECS: the head schedules, it never trains
        f"--port={p}", f"--node-manager-port={p + 1}", f"--object-manager-port={p + 2}",
        f"--metrics-export-port={p + 3}", f"--dashboard-agent-listen-port={p + 4}",
        f"--dashboard-agent-grpc-port={p + 5}", f"--runtime-env-agent-port={p + 6}",
        f"--ray-client-server-port={p + 7}",
        "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={spec.dashboard_port}",
        f"--temp-dir={temp_dir}",
    ]  # fmt: skip


def _worker_args(spec: ClusterSpec, index: int) -> list[str]:
    b = spec.port + 10 * (index + 1)
    return [
        f"--address=127.0.0.1:{spec.port}", f"--num-cpus={spec.cpus_per_worker:g}",
        f"--num-gpus={spec.gpus_per_worker}",
        f"--node-manager-port={b}", f"--object-manager-port={b + 1}", f"--metrics-export-port={b + 2}",
        f"--dashboard-agent-listen-port={b + 3}", f"--dashboard-agent-grpc-port={b + 4}",
        f"--runtime-env-agent-port={b + 5}",
        # One host, one session log dir: the head's log monitor already forwards every worker's output to
        # the driver; a monitor per node would print each line once per node. (On ECS each node has its own.)
        "--include-log-monitor=false",
    ]  # fmt: skip


def ray_cli() -> str:
    """The `ray` of this interpreter's environment: .venv/bin is not on PATH when make runs .venv/bin/python."""
    beside = Path(sys.executable).parent / "ray"
    return str(beside) if beside.exists() else (shutil.which("ray") or "ray")


def _start_node(name: str, args: list[str], spec: ClusterSpec, env: dict, log_dir: Path) -> int:
    log_path = log_dir / f"{name}.log"
    cmd = [ray_cli(), "start", *args,
           f"--object-store-memory={spec.object_store_bytes}", "--disable-usage-stats", "--block"]  # fmt: skip
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=REPO,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if READY_MARK in text:
            return proc.pid
        if proc.poll() is not None:
            raise ClusterError(f"{name} exited with code {proc.returncode}; log {log_path}:\n{_tail(text)}")
        time.sleep(0.5)
    raise ClusterError(f"{name} did not start within {START_TIMEOUT_S}s; log {log_path}:\n{_tail(text)}")


def _wait_for_nodes(state: ClusterState, count: int) -> None:
    """Wait until the head reports `count` alive nodes: `ray start` says it is ready before that."""
    from ray.util.state import list_nodes  # imported late: after ray_auth.use_token_auth()

    deadline = time.monotonic() + START_TIMEOUT_S
    alive = 0
    while time.monotonic() < deadline:
        try:
            alive = len(list_nodes(address=state.dashboard_url, filters=[("state", "=", "ALIVE")]))
        except Exception:  # the dashboard answers a few seconds after the head's GCS
            alive = 0
        if alive >= count:
            return
        time.sleep(0.5)
    raise ClusterError(
        f"only {alive} of {count} Ray nodes registered within {START_TIMEOUT_S}s; logs in {state.log_dir}"
    )


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def up(spec: ClusterSpec, quiet: bool = False) -> ClusterState:
    """Start the cluster and record it; an already running cluster is an error, not a second start."""
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    existing = load_state()
    if existing and find_cluster_pids(existing.cluster_id, existing.pids):
        raise ClusterError(
            f"a rayfleet cluster is already running at {existing.address}; run `make cluster-down` first"
        )
    if existing:
        _clear(existing)
    busy = [port for port in (spec.port, spec.dashboard_port) if not _port_free(port)]
    if busy:
        raise ClusterError(
            f"port(s) {busy} are in use (another Ray?); stop it or set RAYFLEET_RAY_PORT / RAYFLEET_DASHBOARD_PORT"
        )
    cluster_id = uuid.uuid4().hex[:12]
    temp_dir = f"/tmp/rayfleet-{os.getuid()}-{spec.port}"  # short: Ray's socket paths must fit 107 bytes
    log_dir = state_dir() / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    state = ClusterState(
        cluster_id=cluster_id,
        address=f"127.0.0.1:{spec.port}",
        dashboard_url=f"http://127.0.0.1:{spec.dashboard_port}",
        temp_dir=temp_dir,
        log_dir=str(log_dir),
        spec=asdict(spec),
    )
    # Written before anything starts, so `down` finds the processes even if `up` dies half way.
    _write_state(state)
    env = node_env(cluster_id)
    try:
        say(f"starting Ray head (no CPUs for training) at {state.address} ...")
        state.pids.append(_start_node("head", _head_args(spec, temp_dir), spec, env, log_dir))
        _write_state(state)
        _wait_for_nodes(state, 1)
        for i in range(spec.workers):
            say(f"starting worker {i + 1}/{spec.workers} ({spec.cpus_per_worker:g} CPU) ...")
            state.pids.append(_start_node(f"worker-{i + 1}", _worker_args(spec, i), spec, env, log_dir))
            _write_state(state)
            _wait_for_nodes(state, i + 2)
    except BaseException:
        down(quiet=True)
        raise
    say(f"cluster up: 1 head + {spec.workers} workers; RAY_ADDRESS={state.address}; "
        f"dashboard {state.dashboard_url} (token auth on)")  # fmt: skip
    return state


def _write_state(state: ClusterState) -> None:
    state_file().parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    tmp.replace(state_file())


def find_cluster_pids(cluster_id: str, sessions: list[int] = ()) -> list[int]:
    """Live processes of this cluster: those whose environment carries its id, and Ray processes in
    the sessions of its `ray start` nodes (Ray's agents rename themselves, which wipes their environ)."""
    needle = f"RAYFLEET_CLUSTER_ID={cluster_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            state, session = fields[0], int(fields[3])
            if state in "ZX":
                continue
            marked = needle in (entry / "environ").read_bytes().split(b"\0")
            if marked or (session in sessions and b"ray" in (entry / "cmdline").read_bytes()):
                pids.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone while we looked, or not ours to read
    return pids


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def down(quiet: bool = False) -> int:
    """Stop what `up` started (and nothing else); return how many processes were stopped."""
    state = load_state()
    if state is None:
        if not quiet:
            print("no rayfleet cluster recorded; nothing to stop")
        return 0
    pids = find_cluster_pids(state.cluster_id, state.pids)
    _signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and find_cluster_pids(state.cluster_id, state.pids):
        time.sleep(0.3)
    survivors = find_cluster_pids(state.cluster_id, state.pids)
    _signal_all(survivors, signal.SIGKILL)
    _clear(state)
    if not quiet:
        forced = f" ({len(survivors)} needed SIGKILL)" if survivors else ""
        print(f"cluster down: stopped {len(pids)} processes{forced}")
    return len(pids)


def _clear(state: ClusterState) -> None:
    shutil.rmtree(state.temp_dir, ignore_errors=True)
    state_file().unlink(missing_ok=True)


def running() -> ClusterState | None:
    """The recorded cluster if its processes are alive."""
    state = load_state()
    if state and find_cluster_pids(state.cluster_id, state.pids):
        return state
    return None


def status() -> str:
    state = load_state()
    if state is None:
        return "no rayfleet cluster recorded (make cluster-up starts one)"
    pids = find_cluster_pids(state.cluster_id, state.pids)
    if not pids:
        return f"cluster {state.cluster_id} is recorded but not running (make cluster-down clears it)"
    spec = state.spec
    return (
        f"cluster {state.cluster_id}: RAY_ADDRESS={state.address}, dashboard {state.dashboard_url}, "
        f"{spec['workers']} workers x {spec['cpus_per_worker']:g} CPU, {len(pids)} processes, "
        f"logs in {state.log_dir}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.local_cluster", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    up_p = sub.add_parser("up", help="start head + workers")
    up_p.add_argument("--workers", type=int)
    up_p.add_argument("--cpus-per-worker", type=float)
    up_p.add_argument("--gpus-per-worker", type=int)
    sub.add_parser("down", help="stop what `up` started")
    sub.add_parser("status", help="what is running")
    sub.add_parser("env", help="print shell exports for RAY_ADDRESS and token auth")
    args = parser.parse_args(argv)
    try:
        if args.verb == "up":
            up(ClusterSpec.from_env(workers=args.workers, cpus_per_worker=args.cpus_per_worker,
                                    gpus_per_worker=args.gpus_per_worker))  # fmt: skip
        elif args.verb == "down":
            down()
        elif args.verb == "status":
            print(status())
        elif args.verb == "env":
            state = running()
            if state is None:
                raise ClusterError("no rayfleet cluster is running; run `make cluster-up`")
            for key, value in {"RAY_ADDRESS": state.address, **ray_auth.auth_env()}.items():
                print(f"export {key}={value}")
    except (ClusterError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
