"""`make clean`: refuse while results would be lost, ask once, then stop, empty and destroy; safe to run
twice and after a half-done run (see rayfleet/ops/deploy/infra.py for the whole story)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rayfleet.core.aws import Aws, ClusterNotFound, MissingOutputs
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops.deploy.files import INFRA, OUTPUTS
from rayfleet.ops.deploy.teardown_data import empty_bucket, empty_repository, results_held
from rayfleet.ops.deploy.terraform_cli import DeploymentArgs, confirm, terraform, variables


def deployed_names(binary: str) -> dict:
    """What `make clean` empties and stops, by name: from .rayfleet/outputs.json, else from Terraform's state
    (`terraform output -json`: a deploy that failed before saving its outputs, or a half-done destroy), else
    nothing. Keys: region, bucket, repositories, outputs (an Outputs when the file exists, for the teardown)."""
    values: dict = {}
    if OUTPUTS.exists():
        values = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in _json(OUTPUTS).items()}
    else:
        result = subprocess.run([binary, f"-chdir={INFRA}", "output", "-json"], capture_output=True, text=True)
        try:
            values = {k: v.get("value") for k, v in json.loads(result.stdout or "{}").items()}
        except (json.JSONDecodeError, AttributeError):
            values = {}
    urls = values.get("ecr_repository_urls") or {}
    try:  # the teardown needs the cluster's and services' names; a partial state may not have them all
        outputs = Outputs.load(OUTPUTS) if OUTPUTS.exists() else Outputs.from_flat(**values)
    except (TypeError, MissingOutputs):
        outputs = None
    return {
        "region": values.get("region"),
        "bucket": values.get("results_bucket"),
        "repositories": sorted(url.split("/", 1)[1] for url in urls.values()),
        "outputs": outputs,
    }


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def what_clean_destroys(names: dict, held: tuple | None, delete_results: bool) -> str:
    """One paragraph, before the question: what `make clean` stops, deletes and destroys."""
    out = names["outputs"]
    cluster = f"the ECS cluster {out.cluster_name} in {out.region} (its services, tasks and instances)" if out else ""
    parts = [p for p in (cluster, "the network, IAM roles, KMS key, secrets and logs Terraform made") if p]
    if names["repositories"]:
        parts.append(
            f"every image in {len(names['repositories'])} ECR repositories ({', '.join(names['repositories'])})"
        )
    if names["bucket"]:
        objects = f"{held[0]} object(s)" if held else "no objects"
        parts.append(
            f"the results bucket {names['bucket']} with its {objects}, every version deleted"
            if delete_results
            else f"the results bucket {names['bucket']} (empty)"
        )
    return "rayfleet deploy down destroys: " + "; ".join(parts) + "."


def state_left(binary: str) -> list[str]:
    result = subprocess.run([binary, f"-chdir={INFRA}", "state", "list"], capture_output=True, text=True)
    return [line.strip() for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []


def destroy(binary: str, opts: DeploymentArgs) -> int:
    """make clean: refuse first (results present, no consent), ask once, then stop, empty, destroy; each step
    accepts what a half-done earlier clean left (a cluster, repository or bucket already gone)."""
    again = "rayfleet deploy down" + (" --delete-results" if opts.delete_results else "")
    if not opts.yes and not sys.stdin.isatty():  # before anything: a script learns it at once
        raise ConfigError(
            f"rayfleet deploy down asks before destroying and there is no terminal to ask on; `{again} --yes` "
            "destroys without asking"
        )
    terraform(binary, "init", "-input=false")
    names = deployed_names(binary)
    aws = Aws(names["region"] or opts.region or None) if (names["bucket"] or names["repositories"]) else None
    held = results_held(aws.client("s3"), names["bucket"]) if names["bucket"] else None
    if held and held[1] and not opts.delete_results:
        raise RayfleetError(
            f"the results bucket {names['bucket']} holds {held[0]} object(s) ({held[1]} versions and delete "
            "markers): copy what you need (aws s3 sync s3://" + names["bucket"] + " ./results), then run "
            "`rayfleet deploy down --delete-results` to delete them with everything else; nothing was stopped or "
            "destroyed"
        )
    print(what_clean_destroys(names, held, opts.delete_results))
    if not confirm("destroy all of it?", opts.yes, f"`{again} --yes`"):
        print("not destroyed: nothing was stopped, emptied or deleted")
        return 1
    if names["outputs"] is not None:
        from rayfleet.ecs.stop import scale_to_zero

        out = names["outputs"]
        try:
            scale_to_zero(Aws(out.region), out)
        except ClusterNotFound:
            print(f"cluster {out.cluster_name} is already gone; destroying what remains")
    else:
        print("no .rayfleet/outputs.json and no cluster in the state: nothing running to stop first")
    for name in names["repositories"]:
        empty_repository(aws.client("ecr"), name)
    if names["bucket"] and opts.delete_results:
        empty_bucket(aws.client("s3"), names["bucket"])
    try:
        terraform(
            binary,
            "destroy",
            "-input=false",
            "-auto-approve",
            *variables(opts),  # asked above
        )
    except RayfleetError as exc:
        left = state_left(binary)
        listed = f"{len(left)} resource(s) left in the state: {', '.join(left)}" if left else "see the state"
        raise RayfleetError(
            f"{exc}; {listed}; fix what it names, then run `{again}` again (it empties and destroys only what is left)"
        ) from None
    OUTPUTS.unlink(missing_ok=True)  # make train-* goes back to the local cluster
    kept = "" if opts.delete_results else " (the results bucket was empty)"
    print(f"destroyed: everything Terraform made, the images and the results{kept}")
    return 0
