"""Terraform in one command each: plan, deploy (init, plan shown, apply, outputs saved), destroy.

    python -m scripts.infra plan    [--var-file fsdp.tfvars] [--image-tag TAG]     # make plan
    python -m scripts.infra deploy  [--var-file fsdp.tfvars] [--image-tag TAG]     # make deploy
    python -m scripts.infra destroy [--auto-approve]                               # make clean

Before Terraform runs, the preflight names what is missing (the terraform binary, AWS credentials) in one
line. `deploy` applies exactly the plan it showed, then writes `terraform output -json` to
.rayfleet/outputs.json, where every other verb reads it. `destroy` first scales the services to zero and
stops running jobs (scripts/teardown), then destroys; it is safe to run twice: with nothing deployed it
skips the teardown and Terraform destroys nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from scripts.aws import Aws, ClusterNotFound, RayfleetError, run_cli
from scripts.tf_outputs import Outputs

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
OUTPUTS = Path(os.environ.get("RAYFLEET_OUTPUTS") or ROOT / ".rayfleet" / "outputs.json")
PLAN_FILE = ".rayfleet.tfplan"  # inside infra/, git-ignored


def preflight(region: str | None) -> str:
    """The terraform binary and working AWS credentials, or a one-line error saying how to get them."""
    binary = shutil.which("terraform")
    if not binary:
        raise RayfleetError(
            "terraform not found on PATH: install Terraform >= 1.5 (https://developer.hashicorp.com/terraform/install)"
        )
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    identity = Aws(region).client("sts").get_caller_identity()  # NoCredentials etc. become one-line errors
    print(f"deploying as {identity['Arn']} (account {identity['Account']})")
    return binary


def terraform(binary: str, *args: str) -> None:
    command = [binary, f"-chdir={INFRA}", *args]
    print("+ terraform " + " ".join(args), flush=True)
    result = subprocess.run(command)
    if result.returncode != 0:
        raise RayfleetError(f"terraform {args[0]} failed (exit {result.returncode}); its output is above")


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


def deploy(binary: str, opts: argparse.Namespace) -> None:
    plan(binary, opts)
    terraform(binary, "apply", "-input=false", PLAN_FILE)  # exactly the plan shown above
    save_outputs(binary)


def save_outputs(binary: str) -> None:
    result = subprocess.run([binary, f"-chdir={INFRA}", "output", "-json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise RayfleetError(f"terraform output failed: {result.stderr.strip()[:300]}")
    values = json.loads(result.stdout)
    OUTPUTS.parent.mkdir(exist_ok=True)
    OUTPUTS.write_text(json.dumps(values, indent=2) + "\n")
    out = Outputs.load(OUTPUTS)  # fails here, not at the next verb, if an output the scripts need is missing
    print(f"outputs saved to {OUTPUTS}: cluster {out.cluster_name}, bucket {out.results_bucket}")
    print("next: make build push (once per code change), then make train-ddp")


def destroy(binary: str, opts: argparse.Namespace) -> None:
    if OUTPUTS.exists():
        from scripts.teardown import teardown

        out = Outputs.load(OUTPUTS)
        try:
            teardown(Aws(out.region), out)
        except ClusterNotFound:
            print(f"cluster {out.cluster_name} is already gone; destroying what remains")
    else:
        print("no .rayfleet/outputs.json: nothing running to stop first")
    terraform(binary, "init", "-input=false")
    terraform(binary, "destroy", "-input=false", *(["-auto-approve"] if opts.auto_approve else []), *variables(opts))
    OUTPUTS.unlink(missing_ok=True)  # make train-* goes back to the local cluster
    print("destroyed; the results bucket is kept unless results_force_destroy = true")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.infra", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["plan", "deploy", "destroy"])
    parser.add_argument("--var-file", help="a .tfvars file, say fsdp.tfvars (looked up in . then infra/)")
    parser.add_argument("--image-tag", help="tag of the images in ECR (make passes the git commit)")
    parser.add_argument("--region", help="AWS region (default: AWS_REGION, else the variable's us-east-1)")
    parser.add_argument("--auto-approve", action="store_true", help="destroy without Terraform's prompt")
    opts = parser.parse_args(argv)
    binary = preflight(opts.region)
    {"plan": plan, "deploy": deploy, "destroy": destroy}[opts.action](binary, opts)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
