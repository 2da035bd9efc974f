"""The ECS target: the recipe's run in a trainer task of the deployment (RunTask, the recipe in its overrides),
followed from CloudWatch Logs and relaunched when the task is lost before the run ends."""

from __future__ import annotations

import json
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rayfleet.core import ledger, stop_request
from rayfleet.core.aws import Aws, PlacementFailed
from rayfleet.core.catalog import INSTANCE_TYPES, accelerator_of
from rayfleet.core.config import ConfigError
from rayfleet.core.errors import EXIT_FAILED
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.ecs import start
from rayfleet.ecs.fallback import Fallback
from rayfleet.ecs.launch import launch, placed, trainer_with_image
from rayfleet.ecs.logs import follow_task
from rayfleet.ecs.outputs import Outputs
from rayfleet.recipes import cost
from rayfleet.recipes import secrets as recipe_secrets
from rayfleet.recipes.admission import EXIT_CANCELLED, entry_for
from rayfleet.recipes.fit import Capacity
from rayfleet.recipes.group_choice import Choice, Group, alternatives, choose, on_group
from rayfleet.recipes.job import STOPPED_BY_A_SIGNAL, SUBMITTER_STOPPED
from rayfleet.recipes.schema import LoadedRecipe, load
from rayfleet.recipes.stage import stage
from rayfleet.targets import ecs_slot, estimate
from rayfleet.targets.base import package_into


def ecs_groups(aws: Aws | None, out: Outputs) -> tuple[list[Group], list[str]]:
    """The deployment's worker groups as a run chooses among them, priced per node-hour (the Spot price of the last
    hour where a group runs Spot and `aws` is given, else the list price), and the names of groups whose instance
    types the catalog does not know (not checked). One node's shape: with several types, the smallest of them (the
    tasks are sized to it)."""
    groups, unknown = [], []
    for name, group in out.worker_groups.items():
        types = list(group.types)
        shapes = [INSTANCE_TYPES.get(t) for t in types]
        if not types or None in shapes:
            unknown.append(name)
            continue
        nodes = int(group.max_nodes or 0) or None  # the group's maximum: a run needing more never starts
        where = f"the ECS workers ({', '.join(types)})"
        vcpus, memory_mib = min(s["vcpus"] for s in shapes), min(s["memory_mib"] for s in shapes)
        capacity = Capacity(where, float(vcpus), int(shapes[0]["gpus"]), memory_mib / 1024, nodes)
        spot = group_spot_price(aws, group) if aws is not None else None
        price = spot if spot is not None else float(shapes[0]["usd_per_hour"])
        groups.append(Group(name, capacity, price, accelerator_of(types[0]), "/".join(types), spot is not None))
    return groups, unknown


def ecs_choice(aws: Aws | None, out: Outputs, recipe) -> Choice | None:
    """The group the run goes to; None (said in one line) where the catalog does not know the types to check."""
    groups, unknown = ecs_groups(aws, out)
    named = recipe.resources.group
    if unknown and (named in unknown or not groups):
        types = ", ".join(t for n in unknown for t in out.worker_groups[n].types) or "?"
        print(
            f"[rayfleet] warning: worker instance type {types} is not in the catalog; resources not checked",
            file=sys.stderr,
        )
        return None
    return choose(recipe, groups, "this deployment")


def ecs_estimate(out: Outputs, loaded: LoadedRecipe, choice: Choice | None) -> dict:
    """What the run would take on the deployment (rayfleet/targets/estimate.py), at the chosen group's price."""
    group = choice.group.name if choice else loaded.recipe.resources.group
    storage = loaded.recipe.storage or runs_root(out.results_bucket)
    now = time.time()
    past = estimate.past_durations(storage, loaded.recipe.name, group, out.region)
    ahead = estimate.queue_ahead(f"s3://{out.results_bucket}", group, now)
    return estimate.build(group, choice.usd_per_hour if choice else 0.0, past, ahead, now)


def group_spot_price(aws: Aws, group) -> float | None:
    """A Spot group's price per instance-hour (its first type, the last hour's history), else None."""
    if group.lifecycle != "spot":
        return None
    now = datetime.now(UTC)
    return cost.spot_usd_per_hour(aws.client("ec2"), group.types[0], now - timedelta(hours=1), now)


def trainer_environment(recipe, code: dict, storage: str, extra_args: list[str], data: str | None) -> dict:
    """What the trainer's driver reads (rayfleet/node/driver/recipe.py): the recipe, its code and where runs live."""
    return {
        "RAYFLEET_RECIPE": recipe.model_dump_json(exclude_none=True),  # references only, never secret values
        "RAYFLEET_CODE_URI": code["url"],
        "RAYFLEET_CODE_SHA256": code["sha256"],  # the trainer runs the zip only if it still has this hash
        "RAYFLEET_STORAGE": storage,
        "RAYFLEET_EXTRA_ARGS": json.dumps(extra_args),
        **({"RAYFLEET_DATA": data} if data else {}),
    }


def run_ecs(loaded: LoadedRecipe, extra_args: list[str], run_name: str, outputs: str | None, detach: bool) -> int:
    submitted = time.time()  # the run's ledger starts here (rayfleet/recipes/run_ledger.py)
    out = Outputs.load(outputs)
    aws = Aws(out.region)
    choice = ecs_choice(aws, out, loaded.recipe)
    if choice is not None:  # the run goes to that group's nodes only: its queue entry, its job, its placement
        print(f"[rayfleet] {choice.line}", flush=True)
        loaded = on_group(loaded, choice.group.name)
    recipe = loaded.recipe
    capacity = choice.group.capacity if choice else None
    recipe_secrets.check_target(recipe.secret_refs(), "ecs")
    storage = recipe.storage or runs_root(out.results_bucket)
    if not storage.startswith("s3://"):
        raise ConfigError(f"storage: {storage} is a local path; on ECS runs keep results in s3://bucket/prefix")
    aws.check_cluster(out.cluster_name)
    expected = ecs_estimate(out, loaded, choice)
    fallback = run_fallback(aws, out, recipe, choice)
    waited = time.monotonic()
    bring_up(aws, out, group_starts(out, choice), fallback)
    node_wait = time.monotonic() - waited  # the ledger's node start: the run's nodes launched and joined
    loaded, capacity = moved_by(fallback, out, loaded, capacity)
    recipe = loaded.recipe
    run_dir = RunDir(storage, run_name, region=out.region)
    data = stage(loaded.data_path, storage, out.region) if loaded.data_path else None
    with tempfile.TemporaryDirectory(prefix="rayfleet-code-") as tmp:
        group = out.worker_groups.get(recipe.resources.group or "") or next(iter(out.worker_groups.values()))
        on_demand = fallback is not None and any(s["step"] == "on-demand" for s in fallback.steps)
        if on_demand:  # its nodes launch on-demand now: the list price, not the Spot price it was chosen at
            spot = None
        elif choice is not None and choice.group.name == recipe.resources.group:  # priced by the choice: not twice
            spot = choice.group.usd_per_node_hour if choice.group.spot else None
        else:
            spot = group_spot_price(aws, group)
        held = cost.held_ecs(recipe, group.types[0] if group.types else "", capacity, spot)
        code = package_into(loaded, run_dir, Path(tmp), "ecs", extra_args, held)
        timing = {ledger.SUBMITTED: submitted, ledger.NODE_WAIT: round(node_wait, 3)}
        run_dir.send("estimate", estimate=expected, **timing)  # set against the run's ledger when it ends
    task_definition = trainer_with_image(aws, out, recipe.image) if recipe.image else None
    environment = trainer_environment(recipe, code, storage, extra_args, data)

    def announce(record: dict) -> dict:
        fields = {
            "task_arn": record["task_arn"],
            "task_definition": task_definition or out.trainer_task_definition,
            "log_stream": record["log_stream"],
        }
        if fallback is not None and fallback.steps:  # what its capacity's fallback did, with the minutes waited
            fields["capacity_steps"] = fallback.steps
        if run_dir.record().get("state") in ("PENDING", "LOST", "QUEUED"):  # the trainer may have written RUNNING
            fields["state"] = "SUBMITTED"
        run_dir.send("submitted", **fields)  # the trainer's driver owns run.json
        print(f"run {run_name}: task {record['task_arn']}")
        print(f"  results   {run_dir.url}/")
        print(f"  log       {record['log_group']} {record['log_stream']}  (rayfleet logs --run {run_name})")
        return record

    def start_trainer() -> dict:
        kwargs = {"command": ["recipe"], "environment": environment, "task_definition": task_definition}
        return announce(launch(aws, out, recipe.name, extra_args, run_name, **kwargs))

    try:
        record = start_trainer()
    except PlacementFailed as exc:
        if not exc.slots_full:  # the record says why, not LOST: nothing of the run started
            run_dir.send("not-started", state="FAILED", message=str(exc), ended_at=datetime.now(UTC).isoformat())
            raise
        launches = ecs_slot.queue_for_slot(out, run_dir, entry_for(recipe, run_name, held["usd_per_hour"]), exc)
        if detach:
            return 0
        task_arn = ecs_slot.wait_for_slot(launches, run_dir)
        if task_arn is None:
            return EXIT_CANCELLED  # as a queued run cancelled on the local cluster
        record = announce(placed(aws, out, recipe.name, extra_args, run_name, task_arn))
    if detach:
        return 0
    return follow_relaunching(aws, out, run_dir, recipe, record, start_trainer)


def starts_for(recipe_file: str, outputs: str | None = None) -> dict[str, int | None]:
    """`make start RECIPE=...`: the worker nodes that recipe needs here, in the group a run of it would go to."""
    out = Outputs.load(outputs)
    recipe = load(recipe_file, root="/").recipe  # only its resources: nothing of code: or data: is read here
    groups, _ = ecs_groups(None, out)
    if not groups:
        types = ", ".join(t for g in out.worker_groups.values() for t in g.types) or "?"
        raise ConfigError(f"worker instance type {types} is not in the catalog")
    return group_starts(out, choose(recipe, groups, "this deployment"))


def group_starts(out: Outputs, choice: Choice | None) -> dict[str, int | None]:
    """The groups (and nodes) a run's choice starts: its group; a run across the groups, every group (its max)."""
    if choice is None:
        return {}
    if choice.group.name:
        return {choice.group.name: choice.nodes}
    return dict.fromkeys(out.worker_groups)


def moved_by(fallback: Fallback | None, out: Outputs, loaded: LoadedRecipe, capacity):
    """The run and its node's shape on the group its capacity came on (the fallback's last move; else as they are)."""
    moved = [step["to"] for step in fallback.steps if "to" in step] if fallback is not None else []
    if not moved:
        return loaded, capacity
    print(f"[rayfleet] the run goes to worker group {moved[-1]}", flush=True)
    return on_group(loaded, moved[-1]), next(g.capacity for g in ecs_groups(None, out)[0] if g.name == moved[-1])


def run_fallback(aws: Aws, out: Outputs, recipe, choice: Choice | None) -> Fallback | None:
    """The capacity steps the run allows on its group (rayfleet/ecs/fallback.py); None for a run on no group."""
    if choice is None or not choice.group.name:
        return None
    others = (
        alternatives(recipe, ecs_groups(None, out)[0], choice.group.name) if "group" in recipe.capacity_fallback else []
    )
    after_s = recipe.capacity_fallback_after_min * 60
    return Fallback(aws, out, tuple(recipe.capacity_fallback), tuple(others), after_s=after_s)


def bring_up(aws: Aws, out: Outputs, starts: dict[str, int | None], fallback: Fallback | None = None) -> dict | None:
    """Start a stopped deployment (make stop, an autostop), or add the workers this run needs in its group to a
    running one that has fewer; never fewer than it has (another run may use them). What start() returned, or
    None when nothing had to start."""
    ecs = aws.client("ecs")
    down = start.stopped(ecs, out)
    short = []
    for name, nodes in starts.items():
        group = out.group(name)
        found = ecs.describe_services(cluster=out.cluster_name, services=[group.service_name])["services"]
        desired, needed = (found[0]["desiredCount"] if found else 0), nodes or group.max_nodes
        if desired < needed:
            short.append(f"{needed} node(s) of worker group {name} ({desired} run)")
    if down:
        print(
            f"[rayfleet] {', '.join(down)} at zero (rayfleet deploy stop, or an autostop): starting it first",
            flush=True,
        )
    elif short:
        print(f"[rayfleet] the run needs {'; '.join(short)}: adding them first", flush=True)
    else:
        return None
    return start.start(aws, out, starts=starts, fallback=fallback)


UNFINISHED = ("PENDING", "SUBMITTED", "RUNNING")


def ended_with_the_run(record: dict) -> bool:
    """The trainer task ended because its run did, not because the task, its node or the head was lost (the
    driver failed, not by a signal, before its job ended: rayfleet/recipes/job.py)."""
    state, message = record.get("state"), record.get("message") or ""
    lost_head = message.startswith(SUBMITTER_STOPPED) and not any(s in message for s in STOPPED_BY_A_SIGNAL)
    return state not in UNFINISHED and not (state == "FAILED" and lost_head)


def follow_relaunching(aws: Aws, out: Outputs, run_dir: RunDir, recipe, record: dict, start_trainer) -> int:
    """Follow the trainer task; when it stops before the run has ended (its instance lost, the task stopped
    or killed: the record is still unfinished; or the head went away under its driver), relaunch it with the
    same overrides, as long as the recipe's `retries` leave one. The new trainer waits for the head and the
    run resumes from its checkpoint; run.json's `attempts` says what happened."""
    while True:
        code = follow_or_cancel(aws, out, run_dir, record)
        current = run_dir.record()
        if ended_with_the_run(current):  # the trainer finished the record: its exit code is the run's
            return int(current.get("exit_code", code))
        task = aws.client("ecs").describe_tasks(cluster=out.cluster_name, tasks=[record["task_arn"]])["tasks"][0]
        why = current.get("message") if current.get("state") == "FAILED" else None
        why = why or task.get("stoppedReason") or f"the trainer exited {code}"
        # The lost attempt's time counts toward the run's budget and cost like any other's (rayfleet/recipes/cost.py).
        ended = task.get("stoppedAt") or datetime.now(UTC)
        started = cost.attempt_started(current)
        duration_s = round(max(0.0, (ended - started).total_seconds()), 1) if started else 0.0
        attempts = [*(current.get("attempts") or [])]
        attempts.append(
            {
                "attempt": len(attempts) + 1,
                "reason": current.get("attempt_reason", "submitted"),
                "task_arn": record["task_arn"],
                "state": "LOST",
                "exit_code": code,
                "ended_at": ended.isoformat(timespec="seconds"),
                "duration_s": duration_s,
                "why": why,
            }
        )
        run_dir.send(
            "lost",
            attempts=attempts,
            state="LOST",
            message=f"the trainer task stopped before the run ended: {why}",
            ended_at=ended.isoformat(timespec="seconds"),
            duration_s=duration_s,
            cost_usd=cost.cost_usd(current.get("held"), cost.spent_s({"attempts": attempts})),
        )
        if len(attempts) > recipe.retries.count:
            print(
                f"error: run {run_dir.run_name}: the trainer task stopped before the run ended: {why}", file=sys.stderr
            )
            return code or EXIT_FAILED
        print(
            f"[rayfleet] the trainer task stopped before the run ended ({why}); relaunching it with the same "
            f"overrides (attempt {len(attempts) + 1} of {recipe.retries.count + 1})",
            flush=True,
        )
        record = start_trainer()


def follow_or_cancel(aws: Aws, out: Outputs, run_dir: RunDir, record: dict) -> int:
    """Follow the trainer task to its end. The first Ctrl-C cancels the run (the checkpoint-first stop of
    `rayfleet cancel`: a queued run leaves the queue, a running one saves a checkpoint and ends CANCELLED)
    and goes on following it to that end; a second Ctrl-C only stops following (the run is cancelled anyway)."""
    try:
        return follow_task(aws, out, record["task_arn"], record["log_stream"])
    except KeyboardInterrupt:
        pass
    name = run_dir.run_name
    since_ms = int(time.time() * 1000)  # what was printed is not printed again
    stop_request.request(run_dir, stop_request.CANCELLED)
    print(
        f"\n[rayfleet] Ctrl-C: cancelling run {name}: it saves a checkpoint, then ends (Ctrl-C again only stops "
        "following it)",
        file=sys.stderr,
        flush=True,
    )
    try:
        return follow_task(aws, out, record["task_arn"], record["log_stream"], since_ms=since_ms)
    except KeyboardInterrupt:
        print(
            f"[rayfleet] stopped following {name}, which is cancelled (rayfleet logs --run {name} -f)", file=sys.stderr
        )
        raise


class EcsTarget:
    name = "ecs"

    def __init__(self, outputs: str | None = None):
        self.outputs = outputs

    def submit(self, loaded: LoadedRecipe, extra_args: list[str], run_name: str, detach: bool) -> int:
        return run_ecs(loaded, extra_args, run_name, self.outputs, detach)

    def estimate(self, loaded: LoadedRecipe) -> dict:
        out = Outputs.load(self.outputs)
        aws = Aws(out.region)
        return ecs_estimate(out, loaded, ecs_choice(aws, out, loaded.recipe))
