"""A launcher recipe's job driver: one torchrun (or accelerate launch) per Ray worker node, all placed first.

    python -m rayfleet.node.driver.multinode --launcher torchrun [--max-restarts N] [--launcher-arg=OPT ...] \
        -- train.py ARGS...          # as rayfleet.recipes.command.command writes it for `launcher:` recipes

Runs as the Ray job's entrypoint (on the driver's node: the trainer task on ECS, the head locally). It
reserves one bundle per worker node (RAYFLEET_NUM_WORKERS bundles of RAYFLEET_CPUS_PER_WORKER CPUs and
RAYFLEET_GPUS_PER_WORKER GPUs, STRICT_SPREAD: each on its own node) and waits until all are placed, so a run
never starts half-placed. Then a NodeLauncher actor (rayfleet/node/driver/launcher.py) in each bundle
runs the launcher for that node: --nnodes = workers, its node rank, --nproc-per-node = GPUs per worker (1
on CPU), and the rendezvous on a free port of the rank-0 node. The user's script sees exactly what torchrun
gives it (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus the job's
RAYFLEET_* variables, RAYFLEET_NODE_RANK and RAYFLEET_ATTEMPT, in the unpacked code directory.

Every line a node prints is printed here once, as `[node R] line`, so it reaches `make run` and driver.log.
When any node's launcher exits non-zero (or its node is lost), the others are stopped, and the run ends
with that node's exit code after the tail of its output; with --max-restarts N it is launched again, up to
N times, in fresh bundles (the script resumes from its own checkpoint in RAYFLEET_RUN_DIR). SIGTERM and
SIGINT (`ray job stop`, Ctrl-C on `make run`) stop every node's processes first.

When one of the run's nodes is drained for preemption (a Spot notice or a stopped ECS task:
rayfleet/node/drain.py), every rank is told with the deadline (the RAYFLEET_PREEMPT_FILE file, SIGUSR1
where caught: rayfleet/node/driver/preempt_notice.py). That attempt is then over whatever its exit codes: once every
launcher has exited (or at the deadline) the run is launched again on the nodes that are left, waiting up to
RAYFLEET_REPLACE_TIMEOUT_S for a replacement node, and the script resumes from the checkpoint it saved on the
notice. Such a relaunch is not counted against --max-restarts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from dataclasses import dataclass, field

from rayfleet.core import ray_auth, ray_start, worker_groups
from rayfleet.node.driver import preempt_notice
from rayfleet.node.driver.launch_line import LAUNCHERS, Shape, launcher_argv, launcher_env
from rayfleet.node.driver.launcher_output import LOST, Failure, report

PLACE_TIMEOUT_S = float(os.environ.get("RAYFLEET_PLACE_TIMEOUT_S", "300"))
# After a preemption the Auto Scaling group replaces the instance: a new Spot instance, its ECS task and its
# raylet take minutes.
REPLACE_TIMEOUT_S = float(os.environ.get("RAYFLEET_REPLACE_TIMEOUT_S", "900"))
DRAIN_POLL_S = 1.0  # how often the driver asks the GCS whether a node of the run is being drained
NOTICE_GRACE_S = 30.0  # after the notice, once one node has exited, how long the others have to follow
POLL_S = 0.5


class Stopped(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@dataclass
class Attempt:
    """The launchers of one attempt: their actors, placement group and what each has printed."""

    actors: list = field(default_factory=list)
    group: object = None
    running: dict = field(default_factory=dict)  # wait ref -> rank
    node_ids: list = field(default_factory=list)  # Ray node id per node rank
    noticed_at: float | None = None  # when a preemption notice was passed on (the attempt ends at it)
    notice_deadline: float = 0.0  # the drained node's deadline (Unix time)


def say(message: str) -> None:
    print(f"[rayfleet] {message}", flush=True)


def place(shape: Shape, timeout_s: float = PLACE_TIMEOUT_S):
    import ray
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    bundle = {"CPU": shape.cpus, **({"GPU": shape.gpus} if shape.gpus else {})}
    where = worker_groups.from_env(os.environ)  # the recipe's worker group, if any
    group = placement_group(
        [dict(bundle) for _ in range(shape.nodes)],
        strategy="STRICT_SPREAD",
        **worker_groups.bundle_selectors(where, shape.nodes),
    )
    on = f" of group {where}" if where else ""
    say(f"placing {shape.nodes} node(s) of {bundle} (one per worker node{on})...")
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        state = placement_group_table(group).get("state")
        remove_placement_group(group)
        raise SystemExit(
            f"[rayfleet] error: could not place {shape.nodes} worker node(s) of {bundle} within "
            f"{timeout_s:.0f} s (placement group {state}): the cluster has fewer worker nodes of that size"
        )
    return group


def start_attempt(
    launcher: str, shape: Shape, attempt: int, options: list[str], target: list[str], place_s: float = PLACE_TIMEOUT_S
) -> Attempt:
    import ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rayfleet.node.driver.launcher import NodeLauncher

    run = Attempt(group=place(shape, place_s))
    remote = ray.remote(NodeLauncher)
    for index in range(shape.nodes):
        strategy = PlacementGroupSchedulingStrategy(run.group, placement_group_bundle_index=index)
        run.actors.append(
            remote.options(
                num_cpus=shape.cpus, num_gpus=shape.gpus, max_concurrency=4, scheduling_strategy=strategy
            ).remote()
        )
    nodes = ray.get([a.where.remote() for a in run.actors])
    run.node_ids = [node["node_id"] for node in nodes]
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


GRACE_S = 3.0  # after one node fails, how long to collect the others' exits before choosing the first


def follow(run: Attempt) -> Failure | None:
    """Until every launcher has exited 0 (None), or one has not: the node that failed first. When one
    rank raises, the others fail too (their peer is gone); the first to fail is the cause. Meanwhile it
    watches for a drain of the run's nodes; once the notice is passed on, every exit is expected and it waits
    for the rest (NOTICE_GRACE_S after the first, the deadline at the latest), then returns None."""
    import ray

    failures: list[Failure] = []
    end = None  # time.monotonic() at which to stop waiting for the launchers still running
    next_check = 0.0
    while run.running and (end is None or time.monotonic() < end):
        if run.noticed_at is None and time.monotonic() >= next_check:
            next_check = time.monotonic() + DRAIN_POLL_S
            if pass_on_notice(run):
                end = time.monotonic() + max(0.0, run.notice_deadline - time.time()) + GRACE_S
        done, _ = ray.wait(list(run.running), num_returns=1, timeout=POLL_S)
        pump(run)
        for ref in done:
            rank = run.running.pop(ref)
            if run.noticed_at is not None:
                with contextlib.suppress(ray.exceptions.RayActorError):
                    ray.get(ref)
                end = min(end, time.monotonic() + NOTICE_GRACE_S)
                continue
            failure = exited(run, rank, ref)
            if failure:
                failures.append(failure)
                end = end or time.monotonic() + GRACE_S
    if run.noticed_at is not None or not failures:
        return None
    return min(failures, key=lambda f: f.failed_at)


def pass_on_notice(run: Attempt) -> bool:
    """If a node of the run is being drained, tell every node's ranks (with the deadline); whether it was."""
    import ray

    found = preempt_notice.first_drained(run.node_ids, preempt_notice.draining_nodes(), time.time())
    if found is None:
        return False
    rank, node_id, deadline = found
    told = []
    for ref in [actor.notice.remote(deadline, rank, node_id) for actor in run.actors]:
        with contextlib.suppress(ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            told.append(ray.get(ref, timeout=10))
    run.noticed_at, run.notice_deadline = time.time(), deadline
    signalled = sum(t["signalled"] for t in told)
    say(
        f"preemption notice: node {rank} (Ray node {node_id[:12]}) goes in {max(0, round(deadline - time.time()))} s;"
        f" told {len(told)} node(s): {preempt_notice.FILE_VAR} written, SIGUSR1 to {signalled} rank(s) that catch it"
    )
    return True


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


def raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


def run(launcher: str, max_restarts: int, options: list[str], target: list[str], env: dict) -> int:
    ray_auth.use_token_auth()  # before Ray is imported: it reads its auth mode once
    import ray

    shape = Shape.from_env(env)
    # the launchers' output comes back through `read`, once per line; on one host the driver attaches to its
    # own node's raylet, not the head's: the launcher actors it owns would die with a replaced head
    ray.init(log_to_driver=False, **ray_start.driver_init_kwargs(os.environ))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, raise_stopped)
    attempt, restarts, place_s = 0, 0, PLACE_TIMEOUT_S
    while True:
        attempt += 1
        current = None
        try:
            current = start_attempt(launcher, shape, attempt, options, target, place_s)
            failure = follow(current)
        except Stopped as stop:
            say(f"{stop}: stopping every node's processes")
            return 128 + stop.signum
        finally:
            if current is not None:
                finish(current)
        if current.noticed_at is not None:
            say(f"attempt {attempt} ended at the preemption notice; launching again on the nodes that are left")
            place_s = REPLACE_TIMEOUT_S
            continue
        place_s = PLACE_TIMEOUT_S
        if failure is None:
            say(f"all {shape.nodes} node(s) finished")
            return 0
        report(failure)
        if restarts >= max_restarts:
            return 1 if failure.code == LOST else failure.code
        restarts += 1
        say(f"attempt {attempt} failed; launching again ({restarts}/{max_restarts} restarts)")
        time.sleep(1)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rayfleet.node.driver.multinode", description=__doc__.splitlines()[0])
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
