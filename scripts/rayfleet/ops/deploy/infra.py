"""Terraform in one command each: plan, check, deploy (init, plan shown, priced, asked, applied), destroy.

    rayfleet deploy plan    [--var-file F.tfvars] [--image-tag TAG]
    rayfleet deploy check   [--var-file F.tfvars]
    rayfleet deploy  [--var-file F] [--image-tag TAG] [--force] [--yes]
    rayfleet deploy down    [--yes] [--delete-results]

Before Terraform runs, the terraform binary and AWS credentials are checked (one line each). `check` plans
and runs the preflight (rayfleet/ecs/preflight.py) on the shape Terraform would build: permissions, the
vCPU quotas against the worker group at full size, the instance types offered in the zones. `deploy` does
the same, refuses (exit 2) a plan that replaces the Ray head's task definition or service while a job runs
(a trainer task, or a run.json RUNNING) unless --force, shows the plan's summary and what the
deployment costs per hour running, idle and stopped (rayfleet/ops/deploy/plan_summary.py), then asks; --yes
applies without asking, and a run with no terminal to ask on refuses without it. It applies
exactly the plan it showed, then writes `terraform output -json` to .rayfleet/outputs.json, where every
other verb reads it, and seeds the Ray token secret's first value when it has none (Terraform never writes
or reads the token; a rotated token is never overwritten).

`down` (Terraform's destroy) first refuses while the results bucket holds objects unless --delete-results,
then asks once, naming what goes, before anything destructive; then it scales the services to zero and
stops running jobs (rayfleet/ecs/stop.py), deletes every image of the ECR repositories and, with
--delete-results, every version and delete marker of the bucket, then destroys. It is safe to run twice
and after a half-done run: names come from .rayfleet/outputs.json or else Terraform's state, what is
already gone is skipped, and a failed destroy says which resources the state still holds.

Ctrl-C during a Terraform command reaches Terraform once, as SIGINT (it runs in its own process group),
and rayfleet waits for it to stop cleanly: it writes its state and releases its lock. A second Ctrl-C
is passed on too (Terraform then stops at once). Running Terraform and the question: terraform_cli.py;
`destroy`: clean.py; what a plan costs and builds: plan_summary.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from botocore.exceptions import ClientError

from rayfleet.core.aws import Aws
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.core.moved import gone
from rayfleet.ecs import preflight as checks
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops.deploy import clean, plan_summary
from rayfleet.ops.deploy.files import INFRA, OUTPUTS, PLAN_FILE
from rayfleet.ops.deploy.head_guard import refuse_head_replacement
from rayfleet.ops.deploy.teardown_data import error_code
from rayfleet.ops.deploy.terraform_cli import DeploymentArgs, confirm, preflight, terraform, variables


def plan(binary: str, opts: DeploymentArgs) -> None:
    terraform(binary, "init", "-input=false")
    terraform(binary, "plan", "-input=false", f"-out={PLAN_FILE}", *variables(opts))


def check(binary: str, opts: DeploymentArgs, planned: dict | None = None) -> None:
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
        raise RayfleetError(
            f"preflight: {len(report.problems)} problem(s) above; fix them, then `rayfleet deploy check`"
        )
    groups = ", ".join(f"{g.name} {g.count} x {g.instance_types[0]}" for g in shape.groups)
    print(f"preflight: ok for a {shape.head_instance_type} head and worker groups {groups} in {shape.region}")


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


def deploy(binary: str, opts: DeploymentArgs) -> int:
    ask = "rayfleet deploy --yes"
    if not opts.yes and not sys.stdin.isatty():  # before anything: a script learns it at once
        raise ConfigError(f"rayfleet deploy asks before applying and there is no terminal to ask on; {ask} applies")
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
        if out.gcs_store:  # gcs_store.enabled: the store's AUTH token, set on the store and in its secret
            from rayfleet.ecs.rotate_token import seed_store_token

            aws = Aws(out.region)
            store = out.gcs_store
            seed_store_token(
                aws.client("secretsmanager"),
                aws.client("elasticache"),
                store["secret_arn"],
                store["replication_group_id"],
            )
    tag = opts.image_tag or out.image_tag
    if tag and out.ecr_repository_urls:  # the images the services now run are never expired by the lifecycle
        from rayfleet.ops.image_models import models_tag
        from rayfleet.ops.images import mark_deployed

        repositories = sorted(url.split("/", 1)[1] for url in out.ecr_repository_urls.values())
        ecr = Aws(out.region).client("ecr")
        mark_deployed(ecr, repositories, tag)
        worker = out.ecr_repository_urls.get("ray-worker")
        if worker and any(group.models for group in out.worker_groups.values()):  # their image: <tag>-models
            mark_deployed(ecr, [worker.split("/", 1)[1]], models_tag(tag))
    print(
        "next: rayfleet images build, rayfleet images push (once per code change), then rayfleet run recipes/ddp.yaml"
    )
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


def run_deployment(action: str, args: DeploymentArgs) -> int:
    """`rayfleet deploy [plan|check|down]`: `action` is plan, check, deploy or destroy."""
    binary = preflight(args.region)
    return {"plan": plan, "check": check, "deploy": deploy, "destroy": clean.destroy}[action](binary, args) or 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.deploy.infra", "rayfleet deploy [plan|check|down]")
