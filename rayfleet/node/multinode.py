"""A launcher recipe's job driver: one torchrun (or accelerate launch) per Ray worker node, all placed first.

    python -m rayfleet.node.multinode --launcher torchrun [--max-restarts N] [--launcher-arg=OPT ...] \
        -- train.py ARGS...          # as rayfleet.recipes.command.command writes it for `launcher:` recipes

Runs as the Ray job's entrypoint (on the driver's node: the trainer task on ECS, the head locally). It
reserves one bundle per worker node (RAYFLEET_NUM_WORKERS bundles of RAYFLEET_CPUS_PER_WORKER CPUs and
RAYFLEET_GPUS_PER_WORKER GPUs, STRICT_SPREAD: each on its own node) and waits until all are placed, so a run
never starts half-placed. Then a NodeLauncher actor (rayfleet/node/node_launcher.py) in each bundle
runs the launcher for that node: --nnodes = workers, its node rank, --nproc-per-node = GPUs per worker (1
on CPU), and the rendezvous on a free port of the rank-0 node. The user's script sees exactly what torchrun
gives it (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus the job's
RAYFLEET_* variables, RAYFLEET_NODE_RANK and RAYFLEET_ATTEMPT, in the unpacked code directory.

Every line a node prints is printed here once, as `[node R] line`, so it reaches `make run` and driver.log.
When any node's launcher exits non-zero (or its node is lost), the others are stopped, and the run ends
with that node's exit code after the tail of its output; with --max-restarts N it is launched again, up to
N times, in fresh bundles (the script resumes from its own checkpoint in RAYFLEET_RUN_DIR). SIGTERM and
SIGINT (`ray job stop`, Ctrl-C on `make run`) stop every node's processes first.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from rayfleet.core import ray_auth
from rayfleet.node.launcher_output import excerpt, script_traceback

LAUNCHERS = ("torchrun", "accelerate")
PLACE_TIMEOUT_S = float(os.environ.get("RAYFLEET_PLACE_TIMEOUT_S", "300"))
POLL_S = 0.5
LOST = -9  # the exit code reported for a node whose actor died (its node was lost)


class Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass(frozen=True)
class Shape:
    nodes: int
    cpus: float
    gpus: int

    @property
    def procs_per_node(self) -> int:
        return self.gpus or 1

    @classmethod
    def from_env(cls, env: dict) -> Shape:
        return cls(
            nodes=int(env.get("RAYFLEET_NUM_WORKERS") or 1),
            cpus=float(env.get("RAYFLEET_CPUS_PER_WORKER") or 1),
            gpus=int(env.get("RAYFLEET_GPUS_PER_WORKER") or 0),
        )


def launcher_argv(
    launcher: str, shape: Shape, rank: int, master: str, port: int, options: list[str], target: list[str]
) -> list[str]:
    """The interpreter's arguments (after `python`) that start `launcher` for node `rank` of `shape`."""
    if launcher == "torchrun":
        return [
            "-m",
            "torch.distributed.run",
            f"--nnodes={shape.nodes}",
            f"--node-rank={rank}",
            f"--nproc-per-node={shape.procs_per_node}",
            f"--master-addr={master}",
            f"--master-port={port}",
            *options,
            *target,
        ]
    if launcher == "accelerate":  # its multi-process path is torchrun's; on CPU nodes gloo (launcher_env)
        return [
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            f"--num_machines={shape.nodes}",
            f"--machine_rank={rank}",
            f"--num_processes={shape.nodes * shape.procs_per_node}",
            f"--main_process_ip={master}",
            f"--main_process_port={port}",
            *options,
            *target,
        ]
    raise ValueError(f"unknown launcher {launcher!r}; one of {', '.join(LAUNCHERS)}")


def launcher_env(launcher: str, shape: Shape, rank: int, attempt: int, node_id: str) -> dict[str, str]:
    env = {"RAYFLEET_NODE_RANK": str(rank), "RAYFLEET_ATTEMPT": str(attempt), "RAYFLEET_RAY_NODE_ID": node_id}
    if launcher == "accelerate" and not shape.gpus:
        env["ACCELERATE_USE_CPU"] = "true"  # accelerate picks gloo across processes only when told it is on CPU
    return env


@dataclass
class Attempt:
    """The launchers of one attempt: their actors, placement group and what each has printed."""

    actors: list = field(default_factory=list)
    group: object = None
    running: dict = field(default_factory=dict)  # wait ref -> rank


def say(message: str) -> None:
    print(f"[rayfleet] {message}", flush=True)


def place(shape: Shape):
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    bundle = {"CPU": shape.cpus, **({"GPU": shape.gpus} if shape.gpus else {})}
    group = placement_group([dict(bundle) for _ in range(shape.nodes)], strategy="STRICT_SPREAD")
    say(f"placing {shape.nodes} node(s) of {bundle} (one per worker node)...")
    ready, _ = ray.wait([group.ready()], timeout=PLACE_TIMEOUT_S)
    if not ready:
        state = placement_group_table(group).get("state")
        remove_placement_group(group)
        raise SystemExit(
            f"[rayfleet] error: could not place {shape.nodes} worker node(s) of {bundle} within "
            f"{PLACE_TIMEOUT_S:.0f} s (placement group {state}): the cluster has fewer worker nodes of that size"
        )
    return group


def start_attempt(launcher: str, shape: Shape, attempt: int, options: list[str], target: list[str]) -> Attempt:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rayfleet.node.node_launcher import NodeLauncher

    run = Attempt(group=place(shape))
    remote = ray.remote(NodeLauncher)
    for index in range(shape.nodes):
        strategy = PlacementGroupSchedulingStrategy(run.group, placement_group_bundle_index=index)
        run.actors.append(
            remote.options(
                num_cpus=shape.cpus, num_gpus=shape.gpus, max_concurrency=4, scheduling_strategy=strategy
            ).remote()
        )
    nodes = ray.get([a.where.remote() for a in run.actors])
    master, port = nodes[0]["ip"], ray.get(run.actors[0].free_port.remote())
    for rank, (actor, node) in enumerate(zip(run.actors, nodes, strict=True)):
        argv = launcher_argv(launcher, shape, rank, master, port, options, target)
        ray.get(actor.start.remote(argv, launcher_env(launcher, shape, rank, attempt, node["node_id"])))
        run.running[actor.wait.remote()] = rank
        say(f"node {rank}: {node['host']} ({node['ip']}, Ray node {node['node_id'][:12]}) runs {launcher}")
    say(f"rendezvous at {master}:{port}; world size {shape.nodes * shape.procs_per_node}")
    return run


def pump(run: Attempt) -> None:
    import ray

    for rank, ref in enumerate([a.read.remote() for a in run.actors]):
        try:
            lines = ray.get(ref)
        except ray.exceptions.RayActorError:  # a lost node: `follow` reports it from its wait reference
            continue
        for line in lines:
            print(f"[node {rank}] {line}", flush=True)


@dataclass(frozen=True)
class Failure:
    rank: int
    code: int
    failed_at: float  # wall clock on the node (its first traceback, else its exit): which failed first
    tail: list[str]


GRACE_S = 3.0  # after one node fails, how long to collect the others' exits before choosing the first


def follow(run: Attempt) -> Failure | None:
    """Until every launcher has exited 0 (None), or one has not: the node that failed first. When one
    rank raises, the others fail too (their peer is gone); the first to fail is the cause."""
    import ray

    failures: list[Failure] = []
    deadline = None
    while run.running and (deadline is None or time.monotonic() < deadline):
        done, _ = ray.wait(list(run.running), num_returns=1, timeout=POLL_S)
        pump(run)
        for ref in done:
            failure = exited(run, run.running.pop(ref), ref)
            if failure:
                failures.append(failure)
                deadline = deadline or time.monotonic() + GRACE_S
    return min(failures, key=lambda f: f.failed_at) if failures else None


def exited(run: Attempt, rank: int, ref) -> Failure | None:
    import ray

    try:
        code, failed_at = ray.get(ref)
    except ray.exceptions.RayActorError:
        return Failure(rank, LOST, time.time(), [])
    if code == 0:
        return None
    try:  # asked before anything is stopped: the stop would add the launcher's own shutdown
        tail = ray.get(run.actors[rank].last_lines.remote(), timeout=30)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
        tail = []
    return Failure(rank, code, failed_at, tail)


def finish(run: Attempt) -> None:
    """Stop every launcher still running, print what they had left to say, free the bundles."""
    import ray
    from ray.util.placement_group import remove_placement_group

    stops = [a.stop.remote() for a in run.actors]
    for ref in stops:
        with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            ray.get(ref, timeout=60)
    pump(run)
    for actor in run.actors:
        ray.kill(actor)
    if run.group is not None:
        remove_placement_group(run.group)


def report(failure: Failure) -> None:
    """Last in the job's output, after the other nodes have stopped: the failed node's traceback and last
    lines, then the script's traceback unprefixed, so the tail `make run` prints is the script's own."""
    if failure.code == LOST:
        print(f"[rayfleet] error: node {failure.rank} was lost (its Ray actor died)", file=sys.stderr, flush=True)
        return
    rank, shown, own = failure.rank, excerpt(failure.tail), script_traceback(failure.tail)
    print(f"[rayfleet] error: node {rank} exited {failure.code}; its output:", file=sys.stderr, flush=True)
    for line in shown:
        print(f"[node {rank}] {line}", file=sys.stderr, flush=True)
    if own:
        print(f"[rayfleet] node {rank}: the script's traceback", file=sys.stderr, flush=True)
        print("\n".join(own), file=sys.stderr, flush=True)


def raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


def run(launcher: str, max_restarts: int, options: list[str], target: list[str], env: dict) -> int:
    ray_auth.use_token_auth()  # before Ray is imported: it reads its auth mode once
    import ray

    shape = Shape.from_env(env)
    ray.init(log_to_driver=False)  # the launchers' output comes back through `read`, once per line
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, raise_stopped)
    failure = None
    for attempt in range(1, max_restarts + 2):
        current = None
        try:
            current = start_attempt(launcher, shape, attempt, options, target)
            failure = follow(current)
        except Stopped as stop:
            say(f"{stop}: stopping every node's processes")
            return 128 + stop.signum
        finally:
            if current is not None:
                finish(current)
        if failure is None:
            say(f"all {shape.nodes} node(s) finished")
            return 0
        report(failure)
        if attempt <= max_restarts:
            say(f"attempt {attempt} failed; launching again ({attempt}/{max_restarts} restarts)")
            time.sleep(1)
    return 1 if failure.code == LOST else failure.code


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rayfleet.node.multinode", description=__doc__.splitlines()[0])
    parser.add_argument("--launcher", choices=LAUNCHERS, required=True)
    parser.add_argument("--max-restarts", type=int, default=0)
    parser.add_argument("--launcher-arg", action="append", default=[], dest="options")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="-- script.py ARGS or -- -m module ARGS")
    args = parser.parse_args(argv)
    args.target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not args.target:
        parser.error("name the script: -- train.py [ARGS] or -- -m package.module [ARGS]")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    return run(args.launcher, args.max_restarts, args.options, args.target, dict(os.environ))


if __name__ == "__main__":
    sys.exit(main())
