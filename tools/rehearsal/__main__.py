"""A rehearsal of the ECS deployment on one machine (see tools/rehearsal/__init__.py).

    python -m tools.rehearsal up [--tag T] [--var-file F | --state F | --picture F] [--port N]
    python -m tools.rehearsal down [--all]    # stop it; also what a killed one left (--all: any rehearsal's)
    python -m tools.rehearsal env [--identity inspector]  # export lines that point the laptop verbs at it
                                              # (as the operator; the inspector: the account's all-allowed view)
    python -m tools.rehearsal picture         # the deployment picture it runs, as JSON (its input file)
    python -m tools.rehearsal apply --var-file F   # other variables, applied to the running one in place

`rayfleet rehearse up` runs `up` (foreground: Ctrl-C stops everything), `rayfleet rehearse down` runs `down`.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from rayfleet.core.aws import run_cli
from tools.rehearsal import picture as pictures
from tools.rehearsal import podman, reapply
from tools.rehearsal.rehearsal import (
    STATE_DIR,
    Options,
    Rehearsal,
    RehearsalError,
    down,
    environment,
    interrupt,
    read_state,
)


def default_tag() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=pictures.ROOT
    )
    return result.stdout.strip() or "dev"


def load(opts) -> dict:
    try:
        return pictures.deployment_picture(
            var_files=opts.var_file or [],
            image_tag=opts.tag,
            state=Path(opts.state) if getattr(opts, "state", None) else None,
            saved=Path(opts.picture) if getattr(opts, "picture", None) else None,
        )
    except pictures.PictureError as exc:
        raise RehearsalError(str(exc)) from None


def applied(state_dir: Path, picture: dict, timeout_s: float = 300) -> str:
    """Hand the running rehearsal `picture` (tools/rehearsal/reapply.py) and wait until it has applied it."""
    state = read_state(state_dir) or {}
    if not state.get("ready"):
        raise RehearsalError("no rehearsal is running (start one with `rayfleet rehearse up`)")
    reapply.request(state_dir, picture)
    source = picture.get("source", "a picture")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = read_state(state_dir) or {}
        if not (state_dir / reapply.PENDING).exists():
            if state.get("apply_error"):
                raise RehearsalError(f"the rehearsal could not apply it: {state['apply_error']}")
            if state.get("applied") == source:
                return f"applied: {source}"
        time.sleep(0.5)
    raise RehearsalError(f"the rehearsal did not apply it within {timeout_s:.0f}s (is it running?)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.rehearsal", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    up = sub.add_parser("up", help="run the deployment with podman until Ctrl-C")
    apply = sub.add_parser("apply", help="apply other Terraform variables to the running rehearsal, in place")
    for p in (up, sub.add_parser("picture", help="print the deployment picture"), apply):
        p.add_argument("--tag", default=None, help="image tag (default: the git commit, as make build)")
        p.add_argument("--var-file", action="append", help="Terraform variables file (infra/one-group.tfvars)")
        p.add_argument("--state", help="`terraform show -json` of a deployment (default: infra/ applied offline)")
    up.add_argument("--picture", help="a saved deployment picture (the output of `picture`)")
    up.add_argument("--port", type=int, default=0, help="moto's port (default: any free port)")
    up.add_argument(
        "--container-endpoint",
        help="moto's URL as the containers reach it (default: http://<podman network gateway>:<port>)",
    )
    up.add_argument("--ready-timeout", type=float, default=600, help="seconds for the Ray cluster to form")
    for p in (
        up,
        apply,
        env := sub.add_parser("env", help="export lines for the laptop verbs"),
        dn := sub.add_parser("down", help="stop it"),
    ):
        p.add_argument("--state-dir", default=str(STATE_DIR), help=argparse.SUPPRESS)
    dn.add_argument("--all", action="store_true", help="also remove what any other rehearsal left behind")
    env.add_argument(
        "--identity",
        choices=("operator", "inspector"),
        default="operator",
        help="whose keys (IAM is enforced): the operator's, as `make deploy|run` use (default), or the inspector's, "
        "allowed everything, to look at the rehearsal's AWS as the account's root would",
    )
    opts = parser.parse_args(argv)
    state_dir = Path(opts.state_dir) if hasattr(opts, "state_dir") else STATE_DIR
    if opts.verb == "picture":
        opts.tag = opts.tag or default_tag()
        print(json.dumps(load(opts), indent=2))
        return 0
    if opts.verb == "env":
        for key, value in environment(read_state(state_dir) or {}, opts.identity).items():
            print(f"export {key}={value}")
        print("unset AWS_PROFILE")
        return 0
    if opts.verb == "apply":
        opts.tag = opts.tag or default_tag()
        print(applied(state_dir, load(opts)))
        return 0
    if opts.verb == "down":
        print(down(state_dir, everything=opts.all))
        return 0
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # Ctrl-C while rendering too, even in the background
        signal.signal(sig, interrupt)
    if not podman.installed():  # before rendering anything
        raise RehearsalError(
            f"podman is not installed: the rehearsal runs the task definitions with it ({podman.INSTALL})"
        )
    opts.tag = opts.tag or default_tag()
    rehearsal = Rehearsal(
        Options(
            picture=load(opts),
            tag=opts.tag,
            port=opts.port,
            state_dir=state_dir,
            ready_timeout=opts.ready_timeout,
            container_endpoint=opts.container_endpoint,
        )
    )
    return rehearsal.run()


if __name__ == "__main__":
    sys.exit(run_cli(main))
