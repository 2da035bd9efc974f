"""Terraform in one command each: plan, check, deploy (init, plan shown, priced, asked, applied), destroy.

    python -m rayfleet.ops.infra plan    [--var-file fsdp.tfvars] [--image-tag TAG]     # make plan
    python -m rayfleet.ops.infra check   [--var-file fsdp.tfvars]                       # make check
    python -m rayfleet.ops.infra deploy  [--var-file F] [--image-tag TAG] [--force] [--yes]  # make deploy
    python -m rayfleet.ops.infra destroy [--yes] [--delete-results]                     # make clean

Before Terraform runs, the terraform binary and AWS credentials are checked (one line each). `check` plans
and runs the preflight (rayfleet/ecs/preflight.py) on the shape Terraform would build: permissions, the
vCPU quotas against the worker group at full size, the instance types offered in the zones. `deploy` does
the same, refuses (exit 2) a plan that replaces the Ray head's task definition or service while a job runs
(a trainer task, or a run.json RUNNING) unless --force (FORCE=1), shows the plan's summary and what the
deployment costs per hour running, idle and stopped (rayfleet/ops/plan_summary.py), then asks; --yes
(AUTO_APPROVE=1) applies without asking, and a run with no terminal to ask on refuses without it. It applies
exactly the plan it showed, then writes `terraform output -json` to .rayfleet/outputs.json, where every
other verb reads it, and seeds the Ray token secret's first value when it has none (Terraform never writes
or reads the token; a rotated token is never overwritten).

`destroy` first refuses while the results bucket holds objects unless --delete-results, then asks once,
naming what goes, before anything destructive; then it scales the services to zero and stops running jobs
(rayfleet/ecs/teardown.py), deletes every image of the ECR repositories and, with --delete-results, every
version and delete marker of the bucket, then destroys. It is safe to run twice and after a half-done run:
names come from .rayfleet/outputs.json or else Terraform's state, what is already gone is skipped, and a
failed destroy says which resources the state still holds.

Ctrl-C during a Terraform command reaches Terraform once, as SIGINT (it runs in its own process group),
and rayfleet waits for it to stop cleanly: it writes its state and releases its lock. A second Ctrl-C
is passed on too (Terraform then stops at once).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from botocore.exceptions import ClientError

from rayfleet.core.aws import Aws, ClusterNotFound, run_cli
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.ecs import preflight as checks
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops import plan_summary
from rayfleet.ops.deployment_files import INFRA, OUTPUTS, PLAN_FILE
from rayfleet.ops.head_guard import refuse_head_replacement
from rayfleet.ops.teardown_data import empty_bucket, empty_repository, error_code, results_held

OUTPUT_FIELDS = {f.name for f in dataclasses.fields(Outputs)}


def preflight(region: str | None) -> str:
    """The pinned Terraform (`make setup` puts it beside this Python; RAYFLEET_TERRAFORM names another) and
    working AWS credentials, or a one-line error saying how to get them."""
    binary = os.environ.get("RAYFLEET_TERRAFORM") or str(Path(sys.executable).parent / "terraform")
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise RayfleetError(f"terraform not found at {binary}: `make setup` installs the pinned one")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    identity = Aws(region).client("sts").get_caller_identity()  # NoCredentials etc. become one-line errors
    print(f"deploying as {identity['Arn']} (account {identity['Account']})")
    return binary


def terraform(binary: str, *args: str) -> None:
    """Run one Terraform command to its end. It never prompts (rayfleet asks itself), so it runs in its own
    process group with no stdin: a Ctrl-C reaches rayfleet only, which passes it on once and waits, instead of
    subprocess.run's kill 0.25 s after an interrupt (a lost state write, a stale lock)."""
    print("+ terraform " + " ".join(args), flush=True)
    proc = subprocess.Popen([binary, f"-chdir={INFRA}", *args], stdin=subprocess.DEVNULL, process_group=0)
    code = wait_passing_interrupts(proc, f"terraform {args[0]}")
    if code != 0:
        raise RayfleetError(f"terraform {args[0]} failed (exit {code}); its output is above")


def wait_passing_interrupts(proc: subprocess.Popen, what: str) -> int:
    """Wait for proc; each Ctrl-C here is sent to it as SIGINT, and after its end the interrupt goes on."""
    interrupted = 0
    while True:
        try:
            code = proc.wait()
        except KeyboardInterrupt:
            interrupted += 1
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            note = "it stops at once" if interrupted > 1 else "waiting while it stops cleanly; Ctrl-C again: at once"
            print(f"\ninterrupted: {what} got SIGINT; {note}", file=sys.stderr, flush=True)
            continue
        if interrupted:
            raise KeyboardInterrupt
        return code


def confirm(question: str, yes: bool, how: str) -> bool:
    """True when the user answers y/yes (or --yes); a run with no terminal to ask on refuses (exit 2)."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError(f"{question.rstrip('?')}: no terminal to ask on; {how} to go ahead without asking")
    answer = input(f"{question} [y/N] ").strip().lower()
    return answer in ("y", "yes")


def variables(opts: argparse.Namespace) -> list[str]:
    found = []
    if opts.var_file:
        path = Path(opts.var_file)
        path = path if path.is_absolute() or path.exists() else INFRA / path
        if not path.is_file():
            raise RayfleetError(f"variable file {opts.var_file} not found (looked in . and infra/)")
        found.append(f"-var-file={path.resolve()}")
    if opts.image_tag:
        found.append(f"-var=image_tag={opts.image_tag}")
    region = opts.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region:  # the provider follows var.region only, so an exported AWS_REGION must reach it
        found.append(f"-var=region={region}")
    return found


def plan(binary: str, opts: argparse.Namespace) -> None:
    terraform(binary, "init", "-input=false")
    terraform(binary, "plan", "-input=false", f"-out={PLAN_FILE}", *variables(opts))


def check(binary: str, opts: argparse.Namespace, planned: dict | None = None) -> None:
    """make check: the preflight on the shape the plan would build; one line per problem, then refuse."""
    if planned is None:
        plan(binary, opts)
        planned = plan_summary.saved_plan(binary)
    shape = plan_summary.shape_of(planned)
    report = checks.check(Aws(shape.region), shape)
    for note in report.notes:
        print(f"preflight: {note}")
    if report.problems:
        for problem in report.problems:
            print(f"problem: {problem.what}: {problem.fix}", file=sys.stderr)
        raise RayfleetError(f"preflight: {len(report.problems)} problem(s) above; fix them, then `make check`")
    print(
        f"preflight: ok for {shape.worker_count} x {shape.worker_instance_types[0]} and a "
        f"{shape.head_instance_type} head in {shape.region}"
    )


AUTOSCALING_ROLE = "AWSServiceRoleForAutoScaling"


def ensure_autoscaling_role(iam, say=print) -> bool:
    """Create Auto Scaling's service-linked role when the account has none. The KMS key policy names it and KMS
    refuses a policy whose principal does not exist, so a fresh account's first apply failed; AWS itself makes
    the role with an account's first Auto Scaling group, and it belongs to the account, not to a deployment
    (Terraform's optional create_autoscaling_service_linked_role is for plain-Terraform pipelines; left
    false here). Returns whether it was created."""
    try:
        iam.get_role(RoleName=AUTOSCALING_ROLE)
        return False
    except ClientError as exc:
        if error_code(exc) != "NoSuchEntity":
            raise
    try:
        iam.create_service_linked_role(AWSServiceName="autoscaling.amazonaws.com")
    except ClientError as exc:  # made meanwhile (a concurrent first Auto Scaling group): what was wanted
        if "has been taken" not in str(exc):
            raise
    say(
        f"created Auto Scaling's service-linked role {AUTOSCALING_ROLE} "
        "(a fresh account has none; the key policy names it)"
    )
    return True


def deploy(binary: str, opts: argparse.Namespace) -> int:
    ask = "make deploy AUTO_APPROVE=1 (rayfleet deploy --yes)"
    if not opts.yes and not sys.stdin.isatty():  # before anything: a script learns it at once
        raise ConfigError(f"make deploy asks before applying and there is no terminal to ask on; {ask} applies")
    plan(binary, opts)
    planned = plan_summary.saved_plan(binary)
    refuse_head_replacement(planned, opts.force)
    check(binary, opts, planned)
    for line in plan_summary.describe(planned):
        print(line)
    if not confirm("apply this plan?", opts.yes, ask):
        print("not applied: nothing changed")
        return 1
    region = opts.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    ensure_autoscaling_role(Aws(region).client("iam"))
    terraform(binary, "apply", "-input=false", PLAN_FILE)  # exactly the plan shown above
    out = save_outputs(binary)
    if out.ray_token_secret_arn:  # Terraform makes the secret, never its value: the first one is seeded here
        from rayfleet.ecs.rotate_token import seed_token

        seed_token(Aws(out.region).client("secretsmanager"), out.ray_token_secret_arn)
        if out.serve_api_key_secret_arn:  # serve.enabled: the key every Serve request carries, seeded alike
            seed_token(Aws(out.region).client("secretsmanager"), out.serve_api_key_secret_arn, what="the Serve API key")
    tag = opts.image_tag or out.image_tag
    if tag and out.ecr_repository_urls:  # the images the services now run are never expired by the lifecycle
        from rayfleet.ops.images import mark_deployed

        repositories = sorted(url.split("/", 1)[1] for url in out.ecr_repository_urls.values())
        mark_deployed(Aws(out.region).client("ecr"), repositories, tag)
    print("next: make build push (once per code change), then make train-ddp")
    return 0


def save_outputs(binary: str) -> Outputs:
    result = subprocess.run([binary, f"-chdir={INFRA}", "output", "-json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RayfleetError(f"terraform output failed: {result.stderr.strip()[:300]}")
    values = json.loads(result.stdout)
    OUTPUTS.parent.mkdir(exist_ok=True)
    OUTPUTS.write_text(json.dumps(values, indent=2) + "\n")
    out = Outputs.load(OUTPUTS)  # fails here, not at the next verb, if an output the scripts need is missing
    print(f"outputs saved to {OUTPUTS}: cluster {out.cluster_name}, bucket {out.results_bucket}")
    return out


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
        known = {k: values[k] for k in OUTPUT_FIELDS & set(values)}
        outputs = Outputs.load(OUTPUTS) if OUTPUTS.exists() else Outputs(**known)
    except TypeError:
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
    return "make clean destroys: " + "; ".join(parts) + "."


def state_left(binary: str) -> list[str]:
    result = subprocess.run([binary, f"-chdir={INFRA}", "state", "list"], capture_output=True, text=True)
    return [line.strip() for line in result.stdout.splitlines() if line.strip()] if result.returncode == 0 else []


def destroy(binary: str, opts: argparse.Namespace) -> int:
    """make clean: refuse first (results present, no consent), ask once, then stop, empty, destroy; each step
    accepts what a half-done earlier clean left (a cluster, repository or bucket already gone)."""
    again = "make clean" + (" DELETE_RESULTS=1" if opts.delete_results else "")
    if not opts.yes and not sys.stdin.isatty():  # before anything: a script learns it at once
        raise ConfigError(
            f"make clean asks before destroying and there is no terminal to ask on; `{again} AUTO_APPROVE=1` "
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
            "`make clean DELETE_RESULTS=1` to delete them with everything else; nothing was stopped or destroyed"
        )
    print(what_clean_destroys(names, held, opts.delete_results))
    if not confirm("destroy all of it?", opts.yes, f"`{again} AUTO_APPROVE=1`"):
        print("not destroyed: nothing was stopped, emptied or deleted")
        return 1
    if names["outputs"] is not None:
        from rayfleet.ecs.teardown import teardown

        out = names["outputs"]
        try:
            teardown(Aws(out.region), out)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayfleet.ops.infra", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["plan", "check", "deploy", "destroy"])
    parser.add_argument("--var-file", help="a .tfvars file, say fsdp.tfvars (looked up in . then infra/)")
    parser.add_argument("--image-tag", help="tag of the images in ECR (make passes the git commit)")
    parser.add_argument("--region", help="AWS region (default: AWS_REGION, else the variable's us-east-1)")
    parser.add_argument(
        "--yes",
        "--auto-approve",
        dest="yes",
        action="store_true",
        help="deploy, destroy: go ahead without asking (AUTO_APPROVE=1); needed where there is no terminal",
    )
    parser.add_argument("--force", action="store_true", help="deploy even if it replaces the head while a job runs")
    parser.add_argument(
        "--delete-results",
        action="store_true",
        help="destroy: delete the results bucket's objects (every version) too; without it a non-empty bucket "
        "stops make clean before anything is stopped or destroyed",
    )
    opts = parser.parse_args(argv)
    binary = preflight(opts.region)
    return {"plan": plan, "check": check, "deploy": deploy, "destroy": destroy}[opts.action](binary, opts) or 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
