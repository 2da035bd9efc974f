"""Entry point of the Ray images on ECS: start a head, a worker or a job's driver from the task's environment.

    rayfleet-node head                 # ray start --head --block, no CPUs or GPUs of its own (it schedules)
    rayfleet-node worker               # wait for the head's GCS, then ray start --block with the task's resources;
                                       # when Ray exits (head gone) or the head's name moves: resolve it, rejoin
    rayfleet-node driver JOB [ARGS]    # join as a node without resources, run the job, leave; exit code of the job
    rayfleet-node driver recipe        # the same for a recipe run: submit it through the head's Jobs API
    rayfleet-node health               # exit 0 when this task's Ray node answers (the head's health check)

Environment (set by infra/modules/ray): RAYFLEET_HEAD_HOST (Cloud Map name), RAYFLEET_RAY_PORTS (JSON of
infra/catalog/ray_ports.json), RAYFLEET_OBJECT_STORE_MIB, RAYFLEET_NUM_CPUS, RAYFLEET_NUM_GPUS,
RAYFLEET_HEAD_WAIT_S (default 600), RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (from Secrets Manager).
Resources never exceed what the task has: CPUs and memory are capped by the container's cgroup limits and
the object store by the size of /dev/shm.

The head and the workers run `ray start --block` as a child and pass ECS's SIGTERM on to it; a node stopped
that way exits 0 (Ray's own handler exits 1). A worker first drains its node for preemption, on SIGTERM or
a Spot interruption notice, so the jobs on it checkpoint and move (rayfleet/node/drain.py;
RAYFLEET_DRAIN_DEADLINE_S, default 100 of the 120 s stopTimeout; RAYFLEET_SPOT_NOTICE_FILE).
"The head answers" means Ray's health check passes against its GCS with this task's token, not only that
the port is open. A worker never pins the head's IP: it joins by
the Cloud Map name, and when its raylet exits because the GCS is gone (Ray gives up after
gcs_rpc_server_reconnect_timeout_s, 60 s by default) or the name answers at a new address (checked every
5 s), it resolves the name again and rejoins a replaced head without the task restarting. Five exits within
30 s of joining end the task (exit 1), so ECS replaces it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from rayfleet.core import ray_start
from rayfleet.node import drain

DEFAULT_PORTS = {"gcs": {"from": 6379, "to": 6379}, "dashboard": {"from": 8265, "to": 8265}}
MIB = 1024 * 1024


def say(message: str) -> None:
    print(f"rayfleet-node: {message}", flush=True)


def ports(env: dict) -> dict[str, dict]:
    return json.loads(env["RAYFLEET_RAY_PORTS"]) if env.get("RAYFLEET_RAY_PORTS") else DEFAULT_PORTS


# The ports each kind of node pins (infra/catalog/ray_ports.json names): the GCS, dashboard and Ray client are
# the head's; every node pins its own raylet, object manager and agents, and its workers' range.
NODE_PORTS = (
    "node_manager",
    "object_manager",
    "metrics_export",
    "dashboard_agent_http",
    "dashboard_agent_grpc",
    "runtime_env_agent",
)
HEAD_PORTS = ("gcs", "dashboard", "client", *NODE_PORTS)


def pinned(spec: dict[str, dict], names: tuple[str, ...]) -> dict:
    """ray_start.command's ports and worker range, for every fixed port the security group opens."""
    ports = {name: spec[name]["from"] for name in names if name in spec}
    workers = (spec["workers"]["from"], spec["workers"]["to"]) if "workers" in spec else None
    return {"ports": ports, "worker_ports": workers}


def cgroup_cpus(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the container may use: cgroup v2 cpu.max, or v1's quota/period; None when unlimited."""
    v2 = root / "cpu.max"
    if v2.exists():
        quota, period = v2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    quota_file, period_file = root / "cpu" / "cpu.cfs_quota_us", root / "cpu" / "cpu.cfs_period_us"
    if quota_file.exists() and int(quota_file.read_text()) > 0:
        return int(quota_file.read_text()) / int(period_file.read_text())
    return None


def cgroup_memory(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes the container may use: cgroup v2 memory.max or v1's limit; None when unlimited."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        if path.exists():
            text = path.read_text().strip()
            if text == "max" or int(text) >= 2**60:  # v1 reports "unlimited" as a huge number
                return None
            return int(text)
    return None


def shm_bytes(path: str = "/dev/shm") -> int:
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize


def resources(env: dict, cgroup: Path = Path("/sys/fs/cgroup"), shm: str = "/dev/shm") -> dict[str, int]:
    """CPUs, GPUs, memory and object store for `ray start`: what was asked for, capped by what the task has."""
    cpus = int(env.get("RAYFLEET_NUM_CPUS") or os.cpu_count() or 1)
    limit = cgroup_cpus(cgroup)
    if limit is not None:
        cpus = min(cpus, max(1, int(limit)))
    visible = env.get("NVIDIA_VISIBLE_DEVICES", "")
    listed = visible not in ("", "void", "none", "all")
    visible_gpus = len([d for d in visible.split(",") if d.strip()]) if listed else 0
    gpus = int(env.get("RAYFLEET_NUM_GPUS") or visible_gpus)
    shm_size = shm_bytes(shm)
    store = int(env.get("RAYFLEET_OBJECT_STORE_MIB") or 0) * MIB or int(shm_size * 0.8)
    store = min(store, shm_size - 64 * MIB)  # the store lives in /dev/shm: never ask for more than it holds
    memory = cgroup_memory(cgroup)
    if memory is not None:  # shm pages count against the limit: leave the processes at least half of it
        store = min(store, memory // 2)
    result = {"num_cpus": cpus, "num_gpus": gpus, "object_store_memory": max(store, 78 * MIB)}
    if memory is not None:
        # Ray's memory resource: what remains of the task's limit after the store (shm counts against it).
        result["memory"] = max(memory - result["object_store_memory"] - 512 * MIB, 256 * MIB)
    return result


class Stopped(Exception):
    """The task is being stopped (SIGTERM) while the node waits for its head."""


def resolve(host: str, port: int) -> str:
    """The head's IPv4 address as DNS gives it now (Cloud Map: a replaced head has a new one)."""
    return socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]


def gcs_problem(address: str, port: int, timeout: float = 30) -> str | None:
    """None when the GCS at address:port answers Ray's own health check with this task's token; else why not.

    An open port is not enough: a GCS still starting, something else on the port, or a head that refuses
    this token (InvalidAuthToken) all accept the connection."""
    try:
        socket.create_connection((address, port), timeout=3).close()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    command = ["ray", "health-check", "--address", f"{address}:{port}"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"the GCS did not answer `ray health-check` within {timeout:.0f}s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    return f"ray health-check: {(lines or [f'exit {result.returncode}'])[-1][:300]}"


def wait_for_head(host: str, port: int, timeout: float, interval: float = 2.0, stopping=lambda: False) -> str:
    """Resolve the head's name and wait until its GCS answers Ray's health check; return its IP."""
    deadline = time.monotonic() + timeout
    started, last_log, reason = time.monotonic(), 0.0, ""
    while True:
        if stopping():
            raise Stopped
        try:
            address = resolve(host, port)
            reason = gcs_problem(address, port, timeout=max(5.0, min(30.0, deadline - time.monotonic())))
            if reason is None:
                say(f"head {host}:{port} ({address}) answers after {time.monotonic() - started:.0f}s")
                return address
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if now >= deadline:
            raise SystemExit(
                f"rayfleet-node: error: the head {host}:{port} did not answer within {timeout:.0f}s ({reason}); "
                "is the head service running? (make status)"
            )
        if now - last_log >= 10:
            say(f"waiting for the head {host}:{port} ({now - started:.0f}s of {timeout:.0f}s): {reason}")
            last_log = now
        time.sleep(interval)


def head_moved(host: str, port: int, joined: str) -> str | None:
    """The head's new address when its name now points at another GCS that answers; else None."""
    try:
        address = resolve(host, port)
    except OSError:
        return None  # between heads: the old raylet keeps trying until Ray gives up on it
    if address == joined or gcs_problem(address, port) is not None:
        return None
    return address


class Node:
    """`ray start --block` as a child process: a stop signal (ECS StopTask and `podman stop` send SIGTERM)
    is passed on, and a node stopped that way exits 0, not the 1 that Ray's own SIGTERM handler returns.
    With `before_stop(pid, reason, seconds_left)` (a worker's drain: rayfleet/node/drain.py), the node
    runs it first, in the main loop, and only then stops Ray."""

    def __init__(self, before_stop=None) -> None:
        self.child: subprocess.Popen | None = None
        self.stopping = False
        self.before_stop = before_stop
        self.reason, self.left_s = "", None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)

    def _stop(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if not self.stopping:
            say(f"{name}: stopping the Ray node")
            self.stop_for(f"the task was stopped ({name})")
        if self.before_stop is None and self.child is not None and self.child.poll() is None:
            self.child.send_signal(signal.SIGTERM)

    def stop_for(self, reason: str, left_s: float | None = None) -> None:
        if not self.stopping:
            self.stopping, self.reason, self.left_s = True, reason, left_s

    def run(self, command: list[str], watch=None, every: float = 5.0) -> tuple[int | None, object]:
        """Run `command` until it exits, the task is stopped, or `watch()` returns something (checked every
        `every` seconds; the node is then stopped). Returns (exit code, what watch returned or None)."""
        say(" ".join(command))
        self.child = subprocess.Popen(command)
        next_watch = time.monotonic() + every
        while self.child.poll() is None and not self.stopping:
            time.sleep(0.2)
            if watch is None or time.monotonic() < next_watch:
                continue
            next_watch = time.monotonic() + every
            found = watch()
            if found:
                self.terminate()
                return self.child.returncode, found
        if self.stopping:
            if self.before_stop is not None and self.child.poll() is None:
                self.before_stop(self.child.pid, self.reason, self.left_s)
            self.terminate()
        return self.child.wait(), None

    def terminate(self, grace: float = 60) -> None:
        if self.child is None or self.child.poll() is not None:
            return
        self.child.send_signal(signal.SIGTERM)
        try:
            self.child.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()


def drain_first(env: dict, gcs: dict):
    """A worker's before_stop: drain this node for preemption (its jobs checkpoint and restart elsewhere),
    wait until its work is gone or the deadline passes; `gcs["address"]` is the head it joined."""
    default_s = float(env.get("RAYFLEET_DRAIN_DEADLINE_S") or drain.DEFAULT_DEADLINE_S)

    def before_stop(pid: int, reason: str, left_s: float | None) -> None:
        node_id = drain.own_node_id(pid)
        if node_id is None or not gcs.get("address"):
            say("no Ray node to drain")
            return
        deadline = drain.deadline_for(left_s, default_s)
        problem = drain.request(gcs["address"], node_id, reason, deadline)
        if problem:
            say(f"could not drain node {node_id}: {problem}; stopping it now")
            return
        say(f"draining node {node_id} for preemption ({reason}): deadline in {deadline} s")
        say(f"stopping the Ray node: {drain.wait_until_idle(pid, deadline)}")

    return before_stop


def run_job(command: list[str], env: dict) -> int:
    """The job as a child whose exit code is the task's. ECS's SIGTERM is passed on once: the recipe driver
    then stops its Ray job and records STOPPED (a second signal would cut that short); ECS's stopTimeout
    bounds how long it takes."""
    child = subprocess.Popen(command, env=env)

    def stop(signum, frame) -> None:
        say(f"{signal.Signals(signum).name}: passing it on to the job")
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    return child.wait()


def run_head(env: dict) -> int:
    node = Node()
    node.install()
    code, _ = node.run(head_command(env))
    if node.stopping:
        say(f"stopped (ray exited {code})")
        return 0
    return code or 0


QUICK_EXIT_S = 30  # a node that leaves this soon after joining counts towards MAX_QUICK_EXITS
MAX_QUICK_EXITS = 5


def run_worker(env: dict, host: str, port: int, wait_s: float, watch_s: float = 5.0) -> int:
    """Join the head by its name; whenever Ray exits on its own (its raylet dies once the GCS has been
    unreachable for gcs_rpc_server_reconnect_timeout_s) or the name points at a new head that answers,
    resolve the name again and rejoin, in the same container. A stop signal or a Spot interruption notice
    drains the node first (drain_first); it then ends with 0."""
    gcs: dict[str, str] = {}
    node = Node(before_stop=drain_first(env, gcs))
    node.install()
    notices = Path(env.get("RAYFLEET_SPOT_NOTICE_FILE") or drain.SPOT_NOTICE_FILE)

    def watch(joined: str) -> str | None:
        notice = drain.spot_notice(notices)
        if notice is not None:
            say(notice[0])
            node.stop_for(*notice)
            return None
        return head_moved(host, port, joined)

    joins = quick = 0
    while not node.stopping:
        try:
            address = wait_for_head(host, port, wait_s, stopping=lambda: node.stopping)
        except Stopped:
            break
        if joins:  # whatever the last node left behind (Ray kills its processes, but not after a SIGKILL)
            subprocess.run(["ray", "stop", "--force"], capture_output=True, check=False)
        joined_at, gcs["address"] = time.monotonic(), f"{address}:{port}"
        code, moved = node.run(
            join_command(env, host, block=True), watch=lambda joined=address: watch(joined), every=watch_s
        )
        joins += 1
        if node.stopping:
            break
        lived = time.monotonic() - joined_at
        if moved:
            say(f"the head's name {host} now answers at {moved}, not {address}: left; resolving {host} again")
            continue
        say(
            f"ray exited ({code}) after {lived:.0f}s: the head {address} is gone or refused this node; "
            f"resolving {host} again"
        )
        quick = quick + 1 if lived < QUICK_EXIT_S else 0
        if quick >= MAX_QUICK_EXITS:
            raise SystemExit(
                f"rayfleet-node: error: ray exited {quick} times within {QUICK_EXIT_S}s of joining the head; "
                "its output is above"
            )
        pause_until = time.monotonic() + (min(2**quick, 30) if quick else 0)
        while time.monotonic() < pause_until and not node.stopping:
            time.sleep(0.2)
    say(f"stopped after {joins} join(s)")
    return 0


def head_command(env: dict) -> list[str]:
    spec = ports(env)
    res = resources(env)
    res.update(num_cpus=int(env.get("RAYFLEET_NUM_CPUS") or 0), num_gpus=0)  # the head schedules, never trains
    # the dashboard listens on the task's address: only the cluster's own security group reaches it
    return ray_start.command(head=True, block=True, dashboard_host="0.0.0.0", resources=res, **pinned(spec, HEAD_PORTS))


def join_command(env: dict, head: str, block: bool, driver_only: bool = False) -> list[str]:
    """`ray start` joining the head at `head` (its Cloud Map name for a worker, so each start resolves it)."""
    spec = ports(env)
    res = resources(env)
    custom = None
    if driver_only:  # the trainer joins so its driver has a local raylet; it offers nothing to schedule on
        res.update(num_cpus=0, num_gpus=0)
        custom = {trainer_resource(env): 1}  # except a recipe's entrypoint
    address = f"{head}:{spec['gcs']['from']}"
    return ray_start.command(
        address=address, block=block, resources=res, custom_resources=custom, **pinned(spec, NODE_PORTS)
    )


def trainer_resource(env: dict) -> str:
    """A Ray resource only this trainer task's node has: a recipe's Jobs API entrypoint asks for it."""
    return f"rayfleet_trainer_{env.get('HOSTNAME') or socket.gethostname()}"


def job_command(job: str, args: list[str]) -> list[str]:
    """`ddp` and `fsdp` name rayfleet's jobs; anything else is a module to run."""
    module = {"ddp": "rayfleet.train.ddp", "fsdp": "rayfleet.train.fsdp", "recipe": "rayfleet.node.driver"}.get(
        job, job
    )
    return [sys.executable, "-m", module, *args]


def head_address(env: dict) -> tuple[str, int]:
    host = env.get("RAYFLEET_HEAD_HOST")
    if not host:
        raise SystemExit("rayfleet-node: error: RAYFLEET_HEAD_HOST is not set (the head's DNS name)")
    return host, ports(env)["gcs"]["from"]


def main(argv: list[str] | None = None, env: dict | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = dict(os.environ if env is None else env)
    if not argv or argv[0] not in ("head", "worker", "driver", "health"):
        print(__doc__, file=sys.stderr)
        return 2
    role, rest = argv[0], argv[1:]
    if env.get("RAY_AUTH_MODE") != "token":
        say("warning: RAY_AUTH_MODE is not token; the cluster would accept unauthenticated requests")
    if role == "health":
        port = ports(env)["gcs"]["from"]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=3).close()
            return 0
        except OSError:
            return 1
    if role == "head":
        return run_head(env)
    host, port = head_address(env)
    wait_s = float(env.get("RAYFLEET_HEAD_WAIT_S") or 600)
    if role == "worker":
        return run_worker(env, host, port, wait_s)
    head_ip = wait_for_head(host, port, wait_s)
    if not rest:
        raise SystemExit("rayfleet-node: error: name the job: driver ddp|fsdp|<module> [key=value ...]")
    subprocess.run(join_command(env, head_ip, block=False, driver_only=True), check=True)
    try:
        command = job_command(rest[0], rest[1:])
        say(" ".join(command))
        job_env = {
            **env,
            "RAY_ADDRESS": f"{head_ip}:{port}",
            "RAYFLEET_TRAINER_RESOURCE": trainer_resource(env),
            "RAYFLEET_DASHBOARD_URL": f"http://{head_ip}:{ports(env)['dashboard']['from']}",
        }
        return run_job(command, job_env)
    finally:
        subprocess.run(["ray", "stop"], check=False)


def run() -> None:
    """The `rayfleet-node` console script (the images call the same main through images/bin/rayfleet-node)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
