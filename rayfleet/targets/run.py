"""Run a recipe (recipes/*.yaml, see recipes/README.md): on the local Ray cluster, or on the ECS cluster.

    python -m rayfleet.targets.run recipes/ddp.yaml [--target auto|local|ecs] [--set resources.workers=4] [-- ARGS]
    make run RECIPE=recipes/ddp.yaml ARGS="epochs=3" SET="resources.workers=4"

The target is ECS once `make deploy` has saved the Terraform outputs, else local (or --target).
Everything that can be wrong with the recipe (its schema, its code directory, its pins, whether its
resources fit the target) is reported before anything is packaged, uploaded or submitted.

local: the code is zipped into the run directory (./runs/<run> unless the recipe says `storage:`) and
       submitted through Ray's Jobs API to the running `make cluster-up` cluster, or to one started for
       this run and stopped after it; the job's output is followed and its exit code is this command's.
ecs:   the zip goes to s3://<results bucket>/runs/<run>/code-<sha>.zip beside the resolved recipe; the
       trainer task (RunTask, the recipe in its overrides) submits it to the head through the Jobs API,
       follows it and exits with its result, which this command follows from CloudWatch Logs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rayfleet.core import ray_auth
from rayfleet.core.aws import Aws, run_cli
from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.core.config import ConfigError
from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.ecs import start
from rayfleet.ecs.launch import launch, trainer_with_image
from rayfleet.ecs.logs import follow_task
from rayfleet.ecs.outputs import DEFAULT_FILE, Outputs
from rayfleet.local import cluster as local_cluster
from rayfleet.recipes import cost
from rayfleet.recipes import secrets as recipe_secrets
from rayfleet.recipes.job import STOPPED_BY_A_SIGNAL, SUBMITTER_STOPPED, now, run_job, submitter
from rayfleet.recipes.package import PackageError, package
from rayfleet.recipes.schema import Capacity, LoadedRecipe, check_fits, load
from rayfleet.train.job_config import RUN_NAME_PATTERN


def machine_gpus() -> int:
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*"))


def local_capacity(loaded: LoadedRecipe, state: local_cluster.ClusterState | None) -> Capacity:
    if state is not None:
        spec = state.spec
        return Capacity(
            "the running local cluster (make cluster-up)",
            float(spec["cpus_per_worker"]),
            int(spec.get("gpus_per_worker", 0)),
            None,
            int(spec["workers"]),
        )
    res = loaded.recipe.resources  # a cluster started for this run is sized to the recipe
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return Capacity("this machine", res.cpus_per_worker, machine_gpus(), memory_gib, None)


def ecs_capacity(out: Outputs) -> Capacity | None:
    """What one worker offers: with several Spot types, the smallest of them (the tasks are sized to it)."""
    types = list(out.worker_instance_types) or [out.worker_instance_type]
    shapes = [INSTANCE_TYPES.get(t) for t in types]
    if not types or None in shapes:
        return None
    where = f"the ECS workers ({', '.join(types)})"
    vcpus, memory_mib = min(s["vcpus"] for s in shapes), min(s["memory_mib"] for s in shapes)
    return Capacity(where, float(vcpus), int(shapes[0]["gpus"]), memory_mib / 1024, None)


def worker_spot_price(aws: Aws, out: Outputs) -> float | None:
    """The workers' Spot price per instance-hour when the deployment runs them on Spot, else None."""
    if out.worker_lifecycle != "spot":
        return None
    now = datetime.now(UTC)
    return cost.spot_usd_per_hour(aws.client("ec2"), out.worker_instance_type, now - timedelta(hours=1), now)


def package_into(
    loaded: LoadedRecipe, run_dir: RunDir, tmp: Path, target: str, extra_args: list[str], held: dict
) -> dict:
    """Zip the code, store zip + resolved recipe in the run directory, start run.json; return the zip's facts."""
    recipe = loaded.recipe
    pkg = package(loaded.code_dir, tmp / "code.zip", recipe.exclude)
    print(
        f"[rayfleet] packaged {pkg.files} files ({pkg.bytes / 1024:,.0f} KiB) from {loaded.code_dir}, "
        f"sha256 {pkg.sha256[:12]}",
        flush=True,
    )
    if pkg.left_out:
        shown = ", ".join(pkg.left_out[:5]) + (f" and {len(pkg.left_out) - 5} more" if len(pkg.left_out) > 5 else "")
        print(f"[rayfleet] left out {len(pkg.left_out)} file(s) that look like state or keys: {shown}", flush=True)
    code_url = run_dir.upload(f"code-{pkg.sha256[:12]}.zip", pkg.path)
    run_dir.write("recipe.yaml", recipe.to_yaml())
    run_dir.update(
        run_name=run_dir.run_name,
        recipe=recipe.name,
        recipe_file=str(loaded.path),
        target=target,
        code=code_url,
        code_sha256=pkg.sha256,
        code_files=pkg.files,
        extra_args=extra_args,
        state="PENDING",
        created_at=now(),
        submitter=submitter(),
        held=held,
        attempts=[],  # this invocation's; a relaunched trainer task on ECS continues the list
    )
    return {"path": pkg.path, "url": code_url, "sha256": pkg.sha256}


def run_name_arg(value: str) -> str:
    """A run name is a folder and an S3 prefix: the jobs' own rule (letters, digits, . _ -; no path)."""
    if not re.fullmatch(RUN_NAME_PATTERN, value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: a run name is up to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value


def run_local(loaded: LoadedRecipe, extra_args: list[str], run_name: str, launch_dir: Path) -> int:
    recipe = loaded.recipe
    state = local_cluster.running()
    check_fits(recipe, local_capacity(loaded, state))
    storage = recipe.storage or runs_root(launch_dir=launch_dir)
    if not storage.startswith("s3://"):
        storage = str((launch_dir / storage).resolve())
    if recipe.image:
        print(f"[rayfleet] image {recipe.image} applies on ECS only; local runs use this environment", flush=True)
    run_dir = RunDir(storage, run_name)
    with (
        recipe_secrets.handoff(recipe.secret_refs()) as secret_refs,
        tempfile.TemporaryDirectory(prefix="rayfleet-code-") as tmp,
    ):
        code = package_into(loaded, run_dir, Path(tmp), "local", extra_args, cost.held_local())
        started = False
        if state is None:
            print(
                f"[rayfleet] no local Ray cluster running: starting one for this run ({recipe.resources.workers} "
                "workers; stopped when it ends)",
                flush=True,
            )
            res = recipe.resources
            spec = local_cluster.ClusterSpec.from_env(
                workers=res.workers, cpus_per_worker=res.cpus_per_worker, gpus_per_worker=res.gpus_per_worker
            )
            state = local_cluster.up(spec)
            started = True
        try:
            return run_job(
                recipe,
                run_dir,
                address=state.dashboard_url,
                working_dir=str(code["path"]),
                extra_args=extra_args,
                launch_dir=str(launch_dir),
                secret_refs=secret_refs,
            )
        finally:
            if started:
                local_cluster.down(quiet=True)


def run_ecs(loaded: LoadedRecipe, extra_args: list[str], run_name: str, outputs: str | None, detach: bool) -> int:
    recipe = loaded.recipe
    out = Outputs.load(outputs)
    capacity = ecs_capacity(out)
    if capacity is None:
        print(
            f"[rayfleet] warning: worker instance type {out.worker_instance_type or '?'} is not in the catalog; "
            "resources not checked",
            file=sys.stderr,
        )
    else:
        check_fits(recipe, capacity)
    recipe_secrets.check_target(recipe.secret_refs(), "ecs")
    storage = recipe.storage or runs_root(out.results_bucket)
    if not storage.startswith("s3://"):
        raise ConfigError(f"storage: {storage} is a local path; on ECS runs keep results in s3://bucket/prefix")
    aws = Aws(out.region)
    aws.check_cluster(out.cluster_name)
    if down := start.stopped(aws.client("ecs"), out):
        print(f"[rayfleet] {', '.join(down)} at zero (make stop, or an autostop): starting them first", flush=True)
        start.start(aws, out)
    run_dir = RunDir(storage, run_name, region=out.region)
    with tempfile.TemporaryDirectory(prefix="rayfleet-code-") as tmp:
        held = cost.held_ecs(recipe, out.worker_instance_type, capacity, worker_spot_price(aws, out))
        code = package_into(loaded, run_dir, Path(tmp), "ecs", extra_args, held)
    task_definition = trainer_with_image(aws, out, recipe.image) if recipe.image else None
    environment = {
        "RAYFLEET_RECIPE": recipe.model_dump_json(exclude_none=True),  # references only, never secret values
        "RAYFLEET_CODE_URI": code["url"],
        "RAYFLEET_CODE_SHA256": code["sha256"],  # the trainer runs the zip only if it still has this hash
        "RAYFLEET_STORAGE": storage,
        "RAYFLEET_EXTRA_ARGS": json.dumps(extra_args),
    }

    def start_trainer() -> dict:
        record = launch(
            aws,
            out,
            recipe.name,
            extra_args,
            run_name,
            command=["recipe"],
            environment=environment,
            task_definition=task_definition,
        )
        fields = {
            "task_arn": record["task_arn"],
            "task_definition": task_definition or out.trainer_task_definition,
            "log_stream": record["log_stream"],
        }
        if run_dir.record().get("state") in ("PENDING", "LOST"):  # the trainer may have written RUNNING: keep it
            fields["state"] = "SUBMITTED"
        run_dir.update(**fields)
        print(f"run {run_name}: task {record['task_arn']}")
        print(f"  results   {run_dir.url}/")
        print(f"  log       {record['log_group']} {record['log_stream']}  (make logs RUN={run_name})")
        return record

    record = start_trainer()
    if detach:
        return 0
    return follow_relaunching(aws, out, run_dir, recipe, record, start_trainer)


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
        code = follow_task(aws, out, record["task_arn"], record["log_stream"])
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
                "task_arn": record["task_arn"],
                "state": "LOST",
                "exit_code": code,
                "ended_at": ended.isoformat(timespec="seconds"),
                "duration_s": duration_s,
                "why": why,
            }
        )
        run_dir.update(
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


def choose_target(target: str, outputs: str | None) -> str:
    if target != "auto":
        return target
    deployed = Path(outputs or os.environ.get("RAYFLEET_OUTPUTS") or DEFAULT_FILE).is_file()
    return "ecs" if deployed else "local"


def main(argv: list[str] | None = None) -> int:
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    parser = argparse.ArgumentParser(
        prog="python -m rayfleet.targets.run",
        description=__doc__.split("\n")[0],
        epilog="Arguments after -- are appended to the recipe's args.",
    )
    parser.add_argument("recipe", help="the recipe file (recipes/ddp.yaml, or your own)")
    parser.add_argument(
        "--target",
        choices=["auto", "local", "ecs"],
        default="auto",
        help="auto: ecs once `make deploy` saved the outputs, else local (the one place that decides)",
    )
    parser.add_argument("--local-recipe", help="the recipe to run instead when the run goes to the local cluster")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a recipe field, as in resources.workers=4 (repeatable)",
    )
    parser.add_argument("--run-name", type=run_name_arg, help="default: <recipe name>-<UTC time>")
    parser.add_argument("--detach", action="store_true", help="ECS: return once the trainer task has started")
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    argv, extra_args = argv[:split], argv[split + 1 :]  # after --: the entrypoint's, verbatim
    opts = parser.parse_args(argv)
    opts.args = extra_args
    try:
        target = choose_target(opts.target, opts.outputs)
        recipe = opts.local_recipe if target == "local" and opts.local_recipe else opts.recipe
        loaded = load(recipe, [s for item in opts.set for s in item.split()])
        run_name = opts.run_name or f"{loaded.recipe.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        if target == "local":
            return run_local(loaded, opts.args, run_name, Path.cwd())
        return run_ecs(loaded, opts.args, run_name, opts.outputs, opts.detach)
    except (ConfigError, PackageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except local_cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(run_cli(main))
