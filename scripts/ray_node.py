"""Entry point of the Ray images on ECS: start a head, a worker or a job's driver from the task's environment.

    rayfleet-node head                 # ray start --head --block, no CPUs or GPUs of its own (it schedules)
    rayfleet-node worker               # wait for the head's GCS, then ray start --block with the task's resources
    rayfleet-node driver JOB [ARGS]    # join as a node without resources, run the job, leave; exit code of the job
    rayfleet-node driver recipe        # the same for a recipe run: submit it through the head's Jobs API
    rayfleet-node health               # exit 0 when this task's Ray node answers (the head's health check)

Environment (set by infra/modules/ray): RAYFLEET_HEAD_HOST (Cloud Map name), RAYFLEET_RAY_PORTS (JSON of
infra/catalog/ray_ports.json), RAYFLEET_OBJECT_STORE_MIB, RAYFLEET_NUM_CPUS, RAYFLEET_NUM_GPUS,
RAYFLEET_HEAD_WAIT_S (default 600), RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (from Secrets Manager).
Resources never exceed what the task has: CPUs and memory are capped by the container's cgroup limits and
the object store by the size of /dev/shm.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_PORTS = {"gcs": {"from": 6379, "to": 6379}, "dashboard": {"from": 8265, "to": 8265}}
MIB = 1024 * 1024


def say(message: str) -> None:
    print(f"rayfleet-node: {message}", flush=True)


def ports(env: dict) -> dict[str, dict]:
    return json.loads(env["RAYFLEET_RAY_PORTS"]) if env.get("RAYFLEET_RAY_PORTS") else DEFAULT_PORTS


def port_flags(spec: dict[str, dict]) -> list[str]:
    """ray start flags for every fixed port the security group opens (GCS and dashboard are the head's)."""
    single = {
        "object_manager": "--object-manager-port",
        "node_manager": "--node-manager-port",
        "dashboard_agent_grpc": "--dashboard-agent-grpc-port",
        "runtime_env_agent": "--runtime-env-agent-port",
        "metrics_export": "--metrics-export-port",
        "dashboard_agent_http": "--dashboard-agent-listen-port",
    }
    flags = [f"{flag}={spec[name]['from']}" for name, flag in single.items() if name in spec]
    if "workers" in spec:
        flags += [f"--min-worker-port={spec['workers']['from']}", f"--max-worker-port={spec['workers']['to']}"]
    return flags


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


def wait_for_head(host: str, port: int, timeout: float, interval: float = 2.0) -> str:
    """Resolve the head's name and wait until its GCS accepts a connection; return its IP."""
    deadline = time.monotonic() + timeout
    started, last_log, reason = time.monotonic(), 0.0, ""
    while True:
        try:
            address = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
            with socket.create_connection((address, port), timeout=3):
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


def resource_flags(res: dict[str, int]) -> list[str]:
    return [f"--{key.replace('_', '-')}={value}" for key, value in res.items()]


def client_flag(spec: dict[str, dict]) -> list[str]:
    return [f"--ray-client-server-port={spec['client']['from']}"] if "client" in spec else []


def head_command(env: dict) -> list[str]:
    spec = ports(env)
    res = resources(env)
    res.update(num_cpus=int(env.get("RAYFLEET_NUM_CPUS") or 0), num_gpus=0)  # the head schedules, never trains
    head = ["--head", "--block", f"--port={spec['gcs']['from']}", "--dashboard-host=0.0.0.0",
            f"--dashboard-port={spec['dashboard']['from']}", *client_flag(spec)]  # fmt: skip
    return ["ray", "start", *head, *port_flags(spec), *resource_flags(res), "--disable-usage-stats"]


def join_command(env: dict, head_ip: str, block: bool, driver_only: bool = False) -> list[str]:
    spec = ports(env)
    res = resources(env)
    custom = []
    if driver_only:  # the trainer joins so its driver has a local raylet; it offers nothing to schedule on
        res.update(num_cpus=0, num_gpus=0)
        custom = [f"--resources={json.dumps({trainer_resource(env): 1})}"]  # except a recipe's entrypoint
    return ["ray", "start", f"--address={head_ip}:{spec['gcs']['from']}", *(["--block"] if block else []),
            *port_flags(spec), *resource_flags(res), *custom, "--disable-usage-stats"]  # fmt: skip


def trainer_resource(env: dict) -> str:
    """A Ray resource only this trainer task's node has: a recipe's Jobs API entrypoint asks for it."""
    return f"rayfleet_trainer_{env.get('HOSTNAME') or socket.gethostname()}"


def job_command(job: str, args: list[str]) -> list[str]:
    """`ddp` and `fsdp` name rayfleet's jobs; anything else is a module to run."""
    module = {"ddp": "training.ddp", "fsdp": "training.fsdp", "recipe": "scripts.recipe_driver"}.get(job, job)
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
        command = head_command(env)
        say(" ".join(command))
        os.execvp(command[0], command)
    host, port = head_address(env)
    head_ip = wait_for_head(host, port, float(env.get("RAYFLEET_HEAD_WAIT_S") or 600))
    if role == "worker":
        command = join_command(env, head_ip, block=True)
        say(" ".join(command))
        os.execvp(command[0], command)
    if not rest:
        raise SystemExit("rayfleet-node: error: name the job: driver ddp|fsdp|<module> [key=value ...]")
    subprocess.run(join_command(env, head_ip, block=False, driver_only=True), check=True)
    try:
        command = job_command(rest[0], rest[1:])
        say(" ".join(command))
        job_env = {**env, "RAY_ADDRESS": f"{head_ip}:{port}", "RAYFLEET_TRAINER_RESOURCE": trainer_resource(env),
                   "RAYFLEET_DASHBOARD_URL": f"http://{head_ip}:{ports(env)['dashboard']['from']}"}  # fmt: skip
        return subprocess.run(command, env=job_env).returncode
    finally:
        subprocess.run(["ray", "stop"], check=False)


if __name__ == "__main__":
    sys.exit(main())
