"""Running the pinned Terraform for the deployment verbs: the binary and the credentials checked first, one
command run to its end with a Ctrl-C passed on to it once, the variables every command gets, and the one
question asked before anything irreversible."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from rayfleet.core.aws import Aws
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.ops.deploy.files import INFRA


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


@dataclass(frozen=True)
class DeploymentArgs:
    """What the deployment verbs take (rayfleet deploy plan, check, deploy, down), parsed once by the command line."""

    var_file: str | None = None
    image_tag: str | None = None
    region: str | None = None
    yes: bool = False  # deploy, down: go ahead without asking
    force: bool = False  # deploy: even if it replaces the head while a job runs
    delete_results: bool = False  # down: the results bucket's objects too


def variables(opts: DeploymentArgs) -> list[str]:
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
