"""The trainer task's side of a recipe run on ECS: submit the uploaded code to the head, follow, record.

    rayfleet-node driver recipe        # the command `make run` gives the trainer task (scripts/recipes/run.py)

Reads the run from the environment the RunTask overrides set: RAYFLEET_RECIPE (the resolved recipe as JSON,
secret references only), RAYFLEET_CODE_URI (the code zip in S3), RAYFLEET_STORAGE, RAYFLEET_RUN_NAME and
RAYFLEET_EXTRA_ARGS. rayfleet-node sets RAYFLEET_DASHBOARD_URL (the head's Jobs API) and
RAYFLEET_TRAINER_RESOURCE (a resource only this task's Ray node has), so the job's entrypoint runs here,
in the trainer's image with its preloaded models, while its Ray Train workers run on the GPU workers.
Secrets are not resolved here: the job gets their references and resolves them in its own process, with
the same task role (scripts/recipes/job_entry.py). Exit code: the job's.
"""

from __future__ import annotations

import json
import os
import sys

from pydantic import ValidationError

from scripts.recipes import secrets as recipe_secrets
from scripts.recipes.job import run_job
from scripts.recipes.schema import Recipe
from training.core import ray_auth
from training.core.aws import run_cli
from training.core.errors import RayfleetError
from training.core.run_dir import RunDir

REQUIRED = ("RAYFLEET_RECIPE", "RAYFLEET_CODE_URI", "RAYFLEET_STORAGE", "RAYFLEET_RUN_NAME", "RAYFLEET_DASHBOARD_URL")


def main(argv: list[str] | None = None, env: dict | None = None) -> int:
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    env = dict(os.environ if env is None else env)
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise RayfleetError(
            f"recipe driver: {', '.join(missing)} not set (this runs in the trainer task that `make run` starts)"
        )
    try:
        recipe = Recipe.model_validate_json(env["RAYFLEET_RECIPE"])
    except ValidationError as exc:
        raise RayfleetError(f"RAYFLEET_RECIPE is not a valid recipe: {exc.errors()[0]['msg']}") from None
    run_dir = RunDir(env["RAYFLEET_STORAGE"], env["RAYFLEET_RUN_NAME"])
    secret_refs = recipe.secret_refs()
    recipe_secrets.check_target(secret_refs, "ecs")
    resource = env.get("RAYFLEET_TRAINER_RESOURCE")
    return run_job(
        recipe,
        run_dir,
        address=env["RAYFLEET_DASHBOARD_URL"],
        working_dir=env["RAYFLEET_CODE_URI"],
        extra_args=json.loads(env.get("RAYFLEET_EXTRA_ARGS") or "[]"),
        launch_dir=os.getcwd(),
        secret_refs=secret_refs,
        entrypoint_resources={resource: 1} if resource else None,
    )


if __name__ == "__main__":
    sys.exit(run_cli(main))
