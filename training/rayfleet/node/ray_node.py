"""Entry point of the Ray images on ECS: start a head, a worker or a job's driver from the task's environment.

    rayfleet-node head                 # ray start --head --block, no CPUs or GPUs of its own (it schedules)
    rayfleet-node worker               # wait for the head's GCS, then ray start --block with the task's resources;
                                       # when Ray exits (head gone) or the head's name moves: resolve it, rejoin
    rayfleet-node driver JOB [ARGS]    # join as a node without resources, run the job, leave; exit code of the job
    rayfleet-node driver recipe        # the same for a recipe run: submit it through the head's Jobs API; when
                                       # the head goes away while the run is queued: rejoin it, submit again
    rayfleet-node health               # exit 0 when the head's dashboard and GCS answer (its health check)
    rayfleet-node model-cache          # the staged models copied to this instance and checked, before the worker
                                       # (groups with models_from = "s3": rayfleet/node/model_cache.py)

Every node but `health` and `model-cache` first starts its fork server for warm worker processes
(rayfleet/node/warm_server.py).

Environment (set by infra/modules/ray): RAYFLEET_HEAD_HOST (Cloud Map name), RAYFLEET_RAY_PORTS (JSON of
infra/catalog/ray_ports.json), RAYFLEET_OBJECT_STORE_MIB, RAYFLEET_NUM_CPUS, RAYFLEET_NUM_GPUS,
RAYFLEET_HEAD_WAIT_S (default 600), RAY_AUTH_MODE=token and RAY_AUTH_TOKEN (from Secrets Manager).
Resources never exceed what the task has: CPUs and memory are capped by the container's cgroup limits and
the object store by the size of /dev/shm.

The head and the workers run `ray start --block` as a child and pass ECS's SIGTERM on to it; a node stopped
that way exits 0 (Ray's own handler exits 1). A worker first drains its node for preemption, on SIGTERM or
a Spot interruption notice, so the jobs on it checkpoint and move (rayfleet/node/drain.py;
RAYFLEET_DRAIN_DEADLINE_S, default 100 of the 120 s stopTimeout; RAYFLEET_SPOT_NOTICE_FILE), and so does a
node marked suspect (rayfleet/node/control/suspect.py: a bad GPU, by the gpu-metrics sidecar in RAYFLEET_HEALTH_DIR; a
hung rank, by the hang watchdog in RAYFLEET_CURRENT_RUN_DIR), naming its instance (RAYFLEET_IDENTITY_FILE) so
that the control task has it replaced.
"The head answers" means Ray's health check passes against its GCS with this task's token, not only that
the port is open. A worker never pins the head's IP: it joins by
the Cloud Map name, and when its raylet exits because the GCS is gone (Ray gives up after
gcs_rpc_server_reconnect_timeout_s, 60 s by default) or the name answers at a new address (checked every
5 s), it resolves the name again and rejoins a replaced head without the task restarting. With a GCS store
(RAYFLEET_GCS_STORE) it does not leave when the name moves: its raylet reconnects to the replaced head,
which takes the cluster back, and the run's actors on it live on. Five exits within
30 s of joining end the task (exit 1), so ECS replaces it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rayfleet.core import ray_drain
from rayfleet.core.errors import EXIT_HEAD_LOST
from rayfleet.node import drain, health, model_cache, warm_server
from rayfleet.node.control import suspect
from rayfleet.node.head_wait import Stopped, head_moved, wait_for_head
from rayfleet.node.node_spec import (
    GCS_STORE_ENV,
    GCS_STORE_PASSWORD_ENV,
    head_command,
    join_command,
    ports,
    trainer_resource,
)
from rayfleet.node.say import say


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

    def run(
        self, command: list[str], watch=None, every: float = 5.0, env: dict | None = None
    ) -> tuple[int | None, object]:
        """Run `command` (in `env`, else this process's environment) until it exits, the task is stopped, or
        `watch()` returns something (checked every `every` seconds; the node is then stopped). Returns (exit
        code, what watch returned or None)."""
        say(" ".join(_masked(command)))
        self.child = subprocess.Popen(command, env=env)
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
        problem = ray_drain.request(gcs["address"], node_id, reason, deadline)
        if problem:
            say(f"could not drain node {node_id}: {problem}; stopping it now")
            return
        say(f"draining node {node_id} for preemption ({reason}): deadline in {deadline} s")
        say(f"stopping the Ray node: {drain.wait_until_idle(pid, deadline)}")

    return before_stop


def run_driver(command: list[str], env: dict) -> int:
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


def _masked(command: list[str]) -> list[str]:
    """The command as logged: the GCS store's token never reaches the log."""
    return ["--redis-password=***" if arg.startswith("--redis-password=") else arg for arg in command]


def without_store_token(env: dict) -> dict:
    """The head's environment for `ray start`, less the GCS store's token: `ray start` gets it on its command
    line, and every process Ray starts (a job's actors and tasks placed on the head included) inherits this
    environment. Ray itself still hands the token on in its processes' argv (gcs_server, raylet and each
    worker's --redis-password): see docs/DESIGN.md "What a job can reach"."""
    return {k: v for k, v in env.items() if k != GCS_STORE_PASSWORD_ENV}


def run_head(env: dict) -> int:
    node = Node()
    node.install()
    code, _ = node.run(head_command(env), env=without_store_token(env))
    if node.stopping:
        say(f"stopped (ray exited {code})")
        return 0
    return code or 0


IDENTITY_FILE = "/etc/rayfleet/identity.json"  # written by the instance at boot (infra/modules/cluster)
QUICK_EXIT_S = 30  # a node that leaves this soon after joining counts towards MAX_QUICK_EXITS
MAX_QUICK_EXITS = 5


def run_worker(env: dict, host: str, port: int, wait_s: float, watch_s: float = 5.0) -> int:
    """Join the head by its name; whenever Ray exits on its own (its raylet dies once the GCS has been
    unreachable for gcs_rpc_server_reconnect_timeout_s) or the name points at a new head that answers,
    resolve the name again and rejoin, in the same container. A stop signal or a Spot interruption notice
    drains the node first (drain_first); it then ends with 0."""
    gcs: dict[str, str] = {}
    keeps_raylet = bool(env.get(GCS_STORE_ENV))
    node = Node(before_stop=drain_first(env, gcs))
    node.install()
    notices = Path(env.get("RAYFLEET_SPOT_NOTICE_FILE") or drain.SPOT_NOTICE_FILE)

    def watch(joined: str) -> str | None:
        notice = drain.spot_notice(notices)
        if notice is not None:
            say(notice[0])
            node.stop_for(*notice)
            return None
        # The sidecar's verdict on the GPUs, or the hang watchdog's on a rank here
        # (rayfleet/train/control/hang_watch.py)
        found = suspect.read(env.get("RAYFLEET_HEALTH_DIR")) or suspect.read(env.get("RAYFLEET_CURRENT_RUN_DIR"))
        if found is not None:
            why = suspect.reason(found, suspect.instance_id(env.get("RAYFLEET_IDENTITY_FILE") or IDENTITY_FILE))
            say(f"{why}: draining this node")
            node.stop_for(why)
            return None
        # With a GCS store the raylet reconnects to the replaced head by itself and keeps the run's actors;
        # leaving to rejoin would kill them. Without one, the new head knows nothing of this node: rejoin.
        return None if keeps_raylet else head_moved(host, port, joined)

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


def job_command(job: str, args: list[str]) -> list[str]:
    """`ddp` and `fsdp` name rayfleet's jobs; anything else is a module to run."""
    module = {"ddp": "rayfleet.train.ddp", "fsdp": "rayfleet.train.fsdp", "recipe": "rayfleet.node.driver.recipe"}.get(
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
    if not argv or argv[0] not in ("head", "worker", "driver", "health", "model-cache"):
        print(__doc__, file=sys.stderr)
        return 2
    role, rest = argv[0], argv[1:]
    if role == "model-cache":  # no Ray: the worker task's first container (rayfleet/node/model_cache.py)
        return model_cache.main(env)
    if env.get("RAY_AUTH_MODE") != "token":
        say("warning: RAY_AUTH_MODE is not token; the cluster would accept unauthenticated requests")
    if role == "health":
        return health.main(env)
    if role == "driver" and not rest:
        raise SystemExit("rayfleet-node: error: name the job: driver ddp|fsdp|<module> [key=value ...]")
    with warm_server_beside(env) as env:
        if role == "head":
            return run_head(env)
        host, port = head_address(env)
        wait_s = float(env.get("RAYFLEET_HEAD_WAIT_S") or 600)
        if role == "worker":
            return run_worker(env, host, port, wait_s)
        return drive(env, rest, host, port, wait_s)


@contextmanager
def warm_server_beside(env: dict) -> Iterator[dict]:
    """This node's fork server for warm worker processes (rayfleet/core/warm_workers.py), started before
    Ray and stopped when the node ends; yields the environment Ray's nodes get, which names its socket (in
    a private temporary folder). Its output goes to the task's log."""
    server, env = warm_server.spawn(
        Path(tempfile.mkdtemp(prefix="rayfleet-warm-")) / "node.sock", env, with_parent=True
    )
    try:
        yield env
    finally:
        server.terminate()


MAX_HEAD_LOSSES = 3  # a queued run rejoins a replaced head this often before its trainer task gives up


def drive(env: dict, job: list[str], host: str, port: int, wait_s: float) -> int:
    """Join the head as a node without resources, run the job's driver, leave. A recipe run that lost the head
    while it waited in the queue (EXIT_HEAD_LOST: nothing of it ran) waits for the head to answer again, by
    its name, rejoins and runs the driver again, which resubmits the run in its place in the queue.

    Node, driver and follower name the head by its Cloud Map name, never its IP: a head replaced on its GCS
    store is a new task with a new IP, and each reconnect resolves the name again."""
    command = job_command(job[0], job[1:])
    losses = 0
    while True:
        wait_for_head(host, port, wait_s)
        subprocess.run(join_command(env, host, block=False, driver_only=True), check=True)
        try:
            say(" ".join(command))
            job_env = {
                **env,
                "RAY_ADDRESS": f"{host}:{port}",
                "RAYFLEET_TRAINER_RESOURCE": trainer_resource(env),
                "RAYFLEET_DASHBOARD_URL": f"http://{host}:{ports(env)['dashboard']['from']}",
            }
            code = run_driver(command, job_env)
        finally:
            subprocess.run(["ray", "stop"], check=False)
        if code != EXIT_HEAD_LOST or losses == MAX_HEAD_LOSSES:
            return code
        losses += 1
        say(f"the head went away while the run waited in the queue ({losses}): rejoining it by its name")


def run() -> None:
    """The `rayfleet-node` console script (the images call the same main through images/bin/rayfleet-node)."""
    sys.exit(main())


if __name__ == "__main__":
    run()
