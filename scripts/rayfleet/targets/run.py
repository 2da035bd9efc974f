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
import sys
from datetime import UTC, datetime
from pathlib import Path

from rayfleet.core import local_state, ray_auth
from rayfleet.core.aws import run_cli
from rayfleet.core.config import ConfigError
from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.core.run_name import run_name_arg
from rayfleet.local import cluster as local_cluster
from rayfleet.recipes.package import PackageError
from rayfleet.recipes.recipe_root import ROOT_HELP
from rayfleet.recipes.schema import load
from rayfleet.targets.base import Target
from rayfleet.targets.ecs import EcsTarget
from rayfleet.targets.local import LocalTarget


def choose_target(target: str, outputs: str | None) -> str:
    if target != "auto":
        return target
    deployed = (Path(outputs) if outputs else local_state.outputs_file()).is_file()
    return "ecs" if deployed else "local"


def target_for(name: str, outputs: str | None, launch_dir: Path | None = None) -> Target:
    """The Target a run goes to: local or ecs (after choose_target)."""
    return LocalTarget(launch_dir) if name == "local" else EcsTarget(outputs)


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
    parser.add_argument(
        "--root",
        help=ROOT_HELP,
    )
    parser.add_argument(
        "--detach",
        action="store_true",
        help="return once the run is submitted (followed in the background locally)",
    )
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    argv, extra_args = argv[:split], argv[split + 1 :]  # after --: the entrypoint's, verbatim
    opts = parser.parse_args(argv)
    opts.args = extra_args
    try:
        target = choose_target(opts.target, opts.outputs)
        recipe = opts.local_recipe if target == "local" and opts.local_recipe else opts.recipe
        loaded = load(recipe, [s for item in opts.set for s in item.split()], root=opts.root)
        loaded.require_data()  # before anything is started, packaged or staged
        run_name = opts.run_name or f"{loaded.recipe.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        return target_for(target, opts.outputs, Path.cwd()).submit(loaded, opts.args, run_name, opts.detach)
    except (ConfigError, PackageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except local_cluster.ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(run_cli(main))
