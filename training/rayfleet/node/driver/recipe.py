"""The trainer task's side of a recipe run on ECS: submit the uploaded code to the head, follow, record.

    rayfleet-node driver recipe        # the command `make run` gives the trainer task (rayfleet/targets/run.py)

Reads the run from the environment the RunTask overrides set: RAYFLEET_RECIPE (the resolved recipe as JSON,
secret references only), RAYFLEET_CODE_URI (the code zip in S3), RAYFLEET_CODE_SHA256 (its hash, as `make
run` computed it), RAYFLEET_STORAGE, RAYFLEET_RUN_NAME and RAYFLEET_EXTRA_ARGS. Every job may write under
runs/ (one task role), so the zip in S3 is trusted only by its hash: the driver downloads it, refuses it
when the hash differs, and submits those very bytes (Ray takes a local zip to the cluster itself).
rayfleet-node sets RAYFLEET_DASHBOARD_URL (the head's Jobs API) and
RAYFLEET_TRAINER_RESOURCE (a resource only this task's Ray node has), so the job's entrypoint runs here,
in the trainer's image with its preloaded models, while its Ray Train workers run on the GPU workers.
Secrets are not resolved here: the job gets their references and resolves them in its own process, with
the same task role (rayfleet/recipes/job_entry.py). Exit code: the job's; EXIT_HEAD_LOST when the head went
away while the run waited in the queue (rayfleet-node then rejoins the replaced head and runs this again, and
the run keeps its place).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlparse

from pydantic import ValidationError

from rayfleet.core import ray_auth
from rayfleet.core.aws import run_cli
from rayfleet.core.errors import EXIT_HEAD_LOST, RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import secrets as recipe_secrets
from rayfleet.recipes.job import HeadLostWhileQueued, run_job
from rayfleet.recipes.package import sha256_of
from rayfleet.recipes.schema import Recipe

REQUIRED = (
    "RAYFLEET_RECIPE",
    "RAYFLEET_CODE_URI",
    "RAYFLEET_CODE_SHA256",
    "RAYFLEET_STORAGE",
    "RAYFLEET_RUN_NAME",
    "RAYFLEET_DASHBOARD_URL",
)


def verified_code(run_dir: RunDir, uri: str, sha256: str, scratch: Path) -> Path:
    """The run's code zip, downloaded and checked against the hash the launcher computed."""
    name = uri.rsplit("/", 1)[-1]
    if uri != run_dir.display(name):
        raise RayfleetError(f"RAYFLEET_CODE_URI {uri} is not in the run's directory {run_dir.display()}")
    local = run_dir.download(name, scratch / name)
    found = sha256_of(local)
    if found != sha256:
        message = f"the code zip {uri} is not the one `rayfleet run` uploaded (sha256 {found[:12]}, not {sha256[:12]})"
        run_dir.update(state="FAILED", message=f"{message}: not run")
        raise RayfleetError(f"{message}: refusing to run it")
    return local


def queue_root(storage: str) -> str | None:
    """The deployment's queue is in its results bucket (s3://<bucket>/queue/: the task role's prefixes)."""
    return f"s3://{urlparse(storage).netloc}" if storage.startswith("s3://") else None


def main(argv: list[str] | None = None, env: dict | None = None) -> int:
    ray_auth.use_token_auth()  # first: Ray reads its auth mode once, when it is imported
    env = dict(os.environ if env is None else env)
    missing = [k for k in REQUIRED if not env.get(k)]
    if missing:
        raise RayfleetError(
            f"recipe driver: {', '.join(missing)} not set (this runs in the trainer task that `rayfleet run` starts)"
        )
    try:
        recipe = Recipe.model_validate_json(env["RAYFLEET_RECIPE"])
    except ValidationError as exc:
        raise RayfleetError(f"RAYFLEET_RECIPE is not a valid recipe: {exc.errors()[0]['msg']}") from None
    run_dir = RunDir(env["RAYFLEET_STORAGE"], env["RAYFLEET_RUN_NAME"])
    secret_refs = recipe.secret_refs()
    recipe_secrets.check_target(secret_refs, "ecs")
    resource = env.get("RAYFLEET_TRAINER_RESOURCE")
    with tempfile.TemporaryDirectory(prefix="rayfleet-code-") as scratch:
        code = verified_code(run_dir, env["RAYFLEET_CODE_URI"], env["RAYFLEET_CODE_SHA256"], Path(scratch))
        try:
            return run_job(
                recipe,
                run_dir,
                address=env["RAYFLEET_DASHBOARD_URL"],
                working_dir=str(code),
                extra_args=json.loads(env.get("RAYFLEET_EXTRA_ARGS") or "[]"),
                launch_dir=os.getcwd(),
                secret_refs=secret_refs,
                entrypoint_resources={resource: 1} if resource else None,
                data=env.get("RAYFLEET_DATA"),  # the recipe's data, staged by `make run` (rayfleet/recipes/stage.py)
                queue_root=queue_root(env["RAYFLEET_STORAGE"]),
            )
        except HeadLostWhileQueued as exc:  # rayfleet-node rejoins the replaced head and runs this again
            print(f"[rayfleet] {exc}", file=sys.stderr, flush=True)
            return EXIT_HEAD_LOST


if __name__ == "__main__":
    sys.exit(run_cli(main))
