"""`rayfleet`: one command for runs, the local cluster, the deployment and serving.

Argument parsing only. Each verb turns its flags into the call of the package that does the work (imported
when the verb runs, so `--help` is instant and an operator's install needs no training stack). Every flag
means one thing everywhere:

    --on local|ecs|auto   where a run or a Serve application goes (auto: ecs once deployed, else local)
    --node NODE           a container of the deployment: head, worker-N or trainer
    --run NAME            an existing run (`rayfleet runs` lists them); --name names a new one
    --set KEY=VALUE       override a recipe or serving-config field (repeatable)
    --bucket BUCKET       results in s3://BUCKET/runs instead of the deployment's bucket or ./runs
    -d, --detach          return once the work has started, instead of following it

Exit codes: 0 done, 1 the work failed (a job's own non-zero code is passed through), 2 bad input (refused
before anything happened), 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys

from rayfleet.cli import verbs
from rayfleet.core.arg_bounds import float_in, group_arg, group_name, int_in
from rayfleet.core.aws import run_cli
from rayfleet.core.moved import gone
from rayfleet.core.run_name import run_name_arg
from rayfleet.recipes.recipe_root import ROOT_HELP

ON = ("auto", "local", "ecs")
# verbs that became a group's steps: each old one fails in one line naming the new (core/moved.py)
GROUPED = {
    "plan": "deploy plan",
    "check": "deploy check",
    "down": "deploy down",
    "stop": "deploy stop",
    "start": "deploy start",
    "plot": "runs plot",
    "tensorboard": "runs tensorboard",
}
# Every number a verb takes is bounded here, so a bad one is refused by the parser (exit 2, one line), never
# passed on to fail later (exit 1). The local cluster's own limits (at most 50 workers) stay with it
# (rayfleet/local/cluster.py), which refuses with exit 2 too.
WEEK_S = 7 * 24 * 3600.0


def _outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")


def _bucket(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bucket", help="the results bucket (default: the deployment's); runs live in s3://BUCKET/runs")


def _sets(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=f"override a {what} field")


def _runs(sub) -> None:
    p = sub.add_parser("run", help="run a recipe on the local cluster or on ECS, and follow it")
    p.add_argument("recipe", help="the recipe file (recipes/ddp.yaml, or your own)")
    p.add_argument("--on", choices=ON, default="auto", help="auto: ecs once `rayfleet deploy` ran, else local")
    p.add_argument("--local-recipe", help="the recipe to run instead when the run goes to the local cluster")
    p.add_argument("--name", type=run_name_arg, help="the new run's name (default: <recipe name>-<UTC time>)")
    p.add_argument(
        "--root",
        help=ROOT_HELP,
    )
    _sets(p, "recipe")
    p.add_argument(
        "-d",
        "--detach",
        action="store_true",
        help="return once the run is submitted (followed in the background locally)",
    )
    p.add_argument("--check", action="store_true", help="validate the recipe and its data; start nothing")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="where, when and for how much it would run, from past runs; start nothing",
    )
    p.add_argument("args", nargs="*", metavar="-- ARG", help="after --: appended to the recipe's args")
    _bucket(p)
    _outputs(p)
    p.set_defaults(handler=verbs.run)

    p = sub.add_parser("launch", help="run a job module (ddp, fsdp, ...) on ECS directly, without a recipe")
    p.add_argument("job", help="ddp, fsdp, or any module the trainer image runs")
    p.add_argument("args", nargs="*", metavar="key=value", help="passed to the job")
    p.add_argument("--name", type=run_name_arg, help="the new run's name; an existing run's name resumes it")
    p.add_argument("-d", "--detach", action="store_true", help="return once the task has started")
    p.add_argument("--json", action="store_true", help="print the launch record as JSON")
    _bucket(p)
    _outputs(p)
    p.set_defaults(handler=verbs.launch)

    p = sub.add_parser(
        "runs", help="recent runs, local and in S3: state, duration, cost, where the results are; plot, tensorboard"
    )
    p.add_argument("--limit", type=int_in(1, 10_000), default=20)
    p.add_argument("--json", action="store_true")
    p.add_argument("--runs-dir", help="the local runs directory (default: runs)")
    _outputs(p)
    p.set_defaults(handler=verbs.runs)
    _runs_views(p.add_subparsers(dest="view", metavar="[VIEW]"))

    p = sub.add_parser("logs", help="a run's driver log (local or CloudWatch)")
    p.add_argument("--run", type=run_name_arg, required=True, help="the run (rayfleet runs lists them)")
    p.add_argument("--since", help="only events after this: 30s, 10m, 2h, 1d or an ISO time")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    _outputs(p)
    p.set_defaults(handler=verbs.logs)

    p = sub.add_parser("queue", help="the run queue: running and waiting runs, in order, and what each waits for")
    p.add_argument("--json", action="store_true")
    _outputs(p)
    p.set_defaults(handler=verbs.queue)

    p = sub.add_parser("cancel", help="cancel a run: a queued one never starts; a running one checkpoints, then ends")
    p.add_argument("--run", type=run_name_arg, required=True, help="the run (rayfleet runs lists them)")
    _outputs(p)
    p.set_defaults(handler=verbs.cancel)


def _runs_views(sub) -> None:
    """`rayfleet runs plot|tensorboard`: views of runs that exist."""
    p = sub.add_parser("plot", help="draw runs' curves into plots/<run>.png")
    p.add_argument("--run", type=run_name_arg, action="append", required=True, help="a run (repeat to compare runs)")
    p.add_argument("--runs-dir", help="local directory or s3://bucket/prefix (default: where the runs live)")
    p.add_argument("--out", help="the PNG (default: plots/<first run>.png)")
    _bucket(p)
    p.set_defaults(handler=verbs.plot)

    p = sub.add_parser("tensorboard", help="serve runs' TensorBoard on 127.0.0.1")
    p.add_argument("--run", type=run_name_arg, action="append", required=True, help="a run (repeat to compare runs)")
    p.add_argument("--runs-dir", help="local directory or s3://bucket/prefix (default: where the runs live)")
    p.add_argument("--port", type=int_in(1, 65535), default=6006)
    _bucket(p)
    p.set_defaults(handler=verbs.tensorboard)


def _terraform_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--var-file", help="a .tfvars file, say one-group.tfvars (looked up in . then infra/)")
    p.add_argument("--image-tag", help="tag of the images in ECR (default: the git commit)")
    p.add_argument("--region", help="AWS region (default: AWS_REGION, else us-east-1)")


def _deployment(sub) -> None:
    p = sub.add_parser(
        "deploy",
        help="terraform init and plan, the preflight, the plan's summary and cost, then ask and apply; "
        "plan, check, down, stop, start",
    )
    _terraform_flags(p)
    p.add_argument("--force", action="store_true", help="deploy even if it replaces the head during a job")
    p.add_argument("-y", "--yes", action="store_true", help="apply without asking (needed with no terminal)")
    p.set_defaults(handler=verbs.infra, action="deploy")
    _deployment_lifecycle(p.add_subparsers(dest="step", metavar="[STEP]"))
    _deployment_views(sub)


def _deployment_lifecycle(sub) -> None:
    """`rayfleet deploy plan|check|down|stop|start`: the deployment's life besides applying it."""
    for name, text in (
        ("plan", "show what deploy would change"),
        ("check", "the preflight: credentials, permissions, vCPU quotas, instance types offered in the zones"),
    ):
        p = sub.add_parser(name, help=text)
        _terraform_flags(p)
        p.set_defaults(handler=verbs.infra, action=name)
    p = sub.add_parser("down", help="ask once, then services to zero, images deleted, terraform destroy")
    p.add_argument("--var-file")
    p.add_argument("--region")
    p.add_argument("-y", "--yes", "--auto-approve", dest="yes", action="store_true", help="destroy without asking")
    p.add_argument("--delete-results", action="store_true", help="also delete every run's results in S3")
    p.set_defaults(handler=verbs.infra, action="destroy", image_tag=None)

    p = sub.add_parser("stop", help="stop paying for GPUs: services to zero, trainer tasks stopped")
    p.add_argument("--json", action="store_true")
    p.add_argument("--group", type=group_name, help="only this worker group to zero (the head and other groups stay)")
    _outputs(p)
    p.set_defaults(handler=verbs.stop)

    p = sub.add_parser(
        "start", help="bring a stopped deployment back (each worker group at its min) and wait until Ray sees it"
    )
    wait = float_in(0, WEEK_S, low_open=True)
    p.add_argument("--timeout", type=wait, default=1800, help="seconds to wait for Ray to see the workers")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--recipe", help="start the worker nodes this recipe needs, in the group it would run on")
    which.add_argument("--group", type=group_name, help="start this worker group's nodes, up to its max")
    _outputs(p)
    p.set_defaults(handler=verbs.start)


def _deployment_views(sub) -> None:
    p = sub.add_parser("status", help="one screen on the deployment: services, tasks, GPUs, Ray, runs, cost")
    p.add_argument("--json", action="store_true")
    p.add_argument("--runs", type=int_in(0, 1000), default=5, help="how many recent runs to show")
    _outputs(p)
    p.set_defaults(handler=verbs.status)

    p = sub.add_parser("exec", help="a shell or a command in a container of the deployment (ECS Exec)")
    p.add_argument("--node", default="head", help="head (default), worker-N or trainer")
    p.add_argument("--command", default="/bin/bash", help='default: a shell; e.g. "ray status"')
    _outputs(p)
    p.set_defaults(handler=verbs.exec_)

    p = sub.add_parser(
        "dashboard", help="Ray's dashboard in the browser: the deployment's (SSM) or the local cluster's"
    )
    p.add_argument("--local", action="store_true", help="the local cluster's, even when a deployment exists")
    p.add_argument("--run", help="open the page of this run's Ray job")
    p.add_argument("--port", type=int_in(1024, 65535), default=8265, help="the local port of the port-forward")
    p.add_argument("--no-browser", action="store_true", help="print the one-time URL instead of opening it")
    _outputs(p)
    p.set_defaults(handler=verbs.dashboard)

    p = sub.add_parser("images", help="build the images, or push them to the deployment's ECR")
    p.add_argument("action", choices=["build", "push"])
    p.add_argument("--images", help="comma-separated subset (default: all four)")
    p.add_argument("--tag", help="default: the git commit")
    p.add_argument(
        "--models",
        help="build: what ray-worker:<tag>-models preloads (Hub ids or name=/dir, comma-separated; none for none); "
        "default: the built-in recipes' models",
    )
    _outputs(p)
    p.set_defaults(handler=verbs.images)

    p = sub.add_parser("token", help="the cluster's Ray auth token")
    p.add_argument("action", choices=["rotate"])
    p.add_argument("--force", action="store_true", help="rotate even while a job runs (the job will fail)")
    _outputs(p)
    p.set_defaults(handler=verbs.token)


def _cluster_and_serving(sub) -> None:
    p = sub.add_parser("cluster", help="the local Ray cluster: up, down, status, env, or run a command on it")
    p.add_argument("action", choices=["up", "down", "status", "env", "run", "replace-head"])
    p.add_argument("--workers", type=int_in(1, 10_000), help="worker nodes (default 2)")
    p.add_argument(
        "--gcs-store",
        action="store_true",
        default=None,
        help="keep the GCS in a local redis-server, so replace-head can replace a killed head "
        "(default: $RAYFLEET_GCS_STORE)",
    )
    p.add_argument("--cpus-per-worker", type=float_in(0, 1024, low_open=True))
    p.add_argument("--gpus-per-worker", type=int_in(0, 64))
    p.add_argument(
        "--group",
        type=group_arg,
        action="append",
        metavar="NAME=NODES[xGPUS]",
        help="up/run: a worker group of NODES nodes labelled NAME, each with GPUS logical GPUs (default 0; the jobs "
        "still train on CPU), repeatable, e.g. --group small=2x1 --group large=1x4; replaces --workers",
    )
    p.add_argument("command", nargs="*", metavar="-- CMD", help="run: the command (a cluster is started if none)")
    p.set_defaults(handler=verbs.cluster)

    p = sub.add_parser("serve", help="a run's model as a Ray Serve application: up, status, down")
    p.add_argument("action", choices=["up", "status", "down"])
    p.add_argument("--run", type=run_name_arg, help="up: the run to serve (rayfleet runs lists them)")
    p.add_argument("--on", choices=ON, default="auto")
    p.add_argument("--config", help="the serving config (default: recipes/serve.yaml)")
    p.add_argument("--runs-dir", help="up, locally: where the run is (default: runs; or s3://bucket/prefix)")
    _sets(p, "serving-config")
    p.add_argument("--timeout", type=float_in(0, WEEK_S, low_open=True), help="up: seconds to wait for the replicas")
    _bucket(p)
    _outputs(p)
    p.set_defaults(handler=verbs.serve)

    p = sub.add_parser("rehearse", help="the ECS deployment as podman containers on this machine (a checkout)")
    p.add_argument("action", choices=["up", "down", "env", "picture"])
    p.add_argument("rest", nargs="*", metavar="-- ARG", help="after --: the rehearsal's own options")
    p.set_defaults(handler=verbs.rehearse)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="rayfleet", description=__doc__.split("\n")[0], epilog="Exit codes: 0 ok, 1 failed, 2 bad input, 130."
    )
    sub = top.add_subparsers(dest="verb", required=True, metavar="VERB")
    _runs(sub)
    _deployment(sub)
    _cluster_and_serving(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    split = argv.index("--") if "--" in argv else len(argv)
    head, tail = argv[:split], argv[split + 1 :]  # after --: passed on verbatim
    if head and head[0] in GROUPED:
        gone(f"rayfleet {head[0]}", f"rayfleet {GROUPED[head[0]]}")
    opts = parser().parse_args(head)
    for name in ("args", "command", "rest"):  # the verbs that take what follows `--`
        if isinstance(getattr(opts, name, None), list):
            setattr(opts, name, [*getattr(opts, name), *tail])
    if getattr(opts, "bucket", None):  # the deployment's outputs, with this bucket for results
        os.environ["RAYFLEET_RESULTS_BUCKET"] = opts.bucket
    return opts.handler(opts)


def run() -> None:
    """The console script."""
    sys.exit(run_cli(main))


if __name__ == "__main__":
    run()
