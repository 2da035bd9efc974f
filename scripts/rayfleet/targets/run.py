"""Run a recipe (recipes/*.yaml, see recipes/README.md): on the local Ray cluster, or on the ECS cluster.

    rayfleet run recipes/ddp.yaml [--on auto|local|ecs] [--set resources.workers=4] [-- ARGS]

Where it runs is ECS once `rayfleet deploy` has saved the Terraform outputs, else local (or --on).
Everything that can be wrong with the recipe (its schema, its code directory, its pins, whether its
resources fit the target) is reported before anything is packaged, uploaded or submitted.

local: the code is zipped into the run directory (./runs/<run> unless the recipe says `storage:`) and
       submitted through Ray's Jobs API to the running `rayfleet cluster up` cluster, or to one started for
       this run and stopped after it; the job's output is followed and its exit code is this command's.
ecs:   the zip goes to s3://<results bucket>/runs/<run>/code-<sha>.zip beside the resolved recipe; the
       trainer task (RunTask, the recipe in its overrides) submits it to the head through the Jobs API,
       follows it and exits with its result, which this command follows from CloudWatch Logs.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from rayfleet.core import local_state, ray_auth
from rayfleet.core.config import ConfigError
from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.core.moved import gone
from rayfleet.local import cluster as local_cluster
from rayfleet.recipes.package import PackageError
from rayfleet.recipes.schema import load
from rayfleet.targets.base import Target
from rayfleet.targets.ecs import EcsTarget
from rayfleet.targets.estimate import lines as estimate_lines
from rayfleet.targets.local import LocalTarget


def choose_target(target: str, outputs: str | None) -> str:
    if target != "auto":
        return target
    deployed = (Path(outputs) if outputs else local_state.outputs_file()).is_file()
    return "ecs" if deployed else "local"


def target_for(name: str, outputs: str | None, launch_dir: Path | None = None) -> Target:
    """The Target a run goes to: local or ecs (after choose_target)."""
    return LocalTarget(launch_dir) if name == "local" else EcsTarget(outputs)


def submit_recipe(
    recipe: str,
    on: str = "auto",
    local_recipe: str | None = None,
    name: str | None = None,
    sets: list[str] | None = None,
    root: str | None = None,
    detach: bool = False,
    outputs: str | None = None,
    args: list[str] | None = None,
    check: bool = False,
    estimate: bool = False,
) -> int:
    """`rayfleet run RECIPE`: the recipe (or `local_recipe` when the run goes to the local cluster) with its
    `sets` KEY=VALUE overrides and `args` appended to its args, submitted where `on` says (choose_target) as
    run `name` (default <recipe name>-<UTC time>), followed unless `detach`; `check`: validated only (schema,
    code folder, data), nothing packaged or started; `estimate`: what it would take and cost (targets/estimate.py),
    nothing started. The job's exit code, 2 on a recipe refused before anything
    started."""
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    try:
        target = choose_target(on, outputs)
        chosen = local_recipe if target == "local" and local_recipe else recipe
        loaded = load(chosen, [s for item in sets or [] for s in item.split()], root=root)
        data = loaded.require_data()  # before anything is started, packaged or staged
        if check:
            what = f"{loaded.entry_kind()} {loaded.recipe.entrypoint}"
            print(f"recipe {loaded.recipe.name} is valid: {what} in {loaded.code_dir}, data {data or 'none'}")
            return 0
        if estimate:  # nothing packaged, staged or started
            print("\n".join(estimate_lines(target_for(target, outputs, Path.cwd()).estimate(loaded))))
            return 0
        run_name = name or f"{loaded.recipe.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        return target_for(target, outputs, Path.cwd()).submit(loaded, list(args or []), run_name, detach)
    except (ConfigError, PackageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except local_cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.targets.run", "rayfleet run")
