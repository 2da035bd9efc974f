"""What each `rayfleet` verb calls: the flags of rayfleet.cli.main, turned into the call of the module that does
the work. Imports are inside each verb: `rayfleet status` needs no Ray or torch, and `--help` is instant."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from rayfleet.core.errors import EXIT_BAD_INPUT
from rayfleet.core.run_dir import LOCAL_RUNS, runs_root


def run(opts: argparse.Namespace) -> int:
    from rayfleet.targets.run import submit_recipe

    # a --bucket is the run's storage too (a local run keeps its results there as well)
    sets = [*opts.set, *([f"storage={runs_root(opts.bucket)}"] if opts.bucket else [])]
    where = {"on": opts.on, "local_recipe": opts.local_recipe, "root": opts.root, "outputs": opts.outputs}
    how = {"name": opts.name, "sets": sets, "detach": opts.detach, "args": opts.args, "check": opts.check}
    how["estimate"] = opts.estimate
    return submit_recipe(opts.recipe, **how, **where)


def launch(opts: argparse.Namespace) -> int:
    from rayfleet.ecs import launch as ecs_launch

    return ecs_launch.launch_job(opts.job, opts.args, opts.name, opts.detach, opts.json, opts.outputs)


def runs(opts: argparse.Namespace) -> int:
    from rayfleet.ops import runs as ops_runs

    return ops_runs.show_runs(opts.limit, opts.json, opts.runs_dir or LOCAL_RUNS, opts.outputs)


def logs(opts: argparse.Namespace) -> int:
    from rayfleet.ops.runs import logs as ops_logs

    return ops_logs.show_logs(opts.run, opts.since, opts.follow, opts.outputs)


def queue(opts: argparse.Namespace) -> int:
    from rayfleet.ops.runs import queued as ops_queue

    return ops_queue.show_queue(opts.json, opts.outputs)


def cancel(opts: argparse.Namespace) -> int:
    """The checkpoint-first stop a budget uses (rayfleet/core/stop_request.py): the job sees the request at its next
    agreed point, saves a checkpoint and ends; a queued run sees it while it waits and never starts; the run's
    follower stops a job that has not ended after the grace period, or at a second cancel. Either way the run
    ends CANCELLED; `rayfleet logs --run` shows it."""
    from rayfleet.core import stop_request
    from rayfleet.ops.runs import locate

    run_dir = locate(opts.run, opts.outputs)
    state = run_dir.record().get("state")
    if state in ("SUCCEEDED", "FAILED", "STOPPED", "LOST", "CANCELLED"):
        print(f"error: run {opts.run} has already ended ({state}): nothing to cancel", file=sys.stderr)
        return EXIT_BAD_INPUT
    # the second cancel: no more waiting
    if state == "RUNNING" and stop_request.requested(run_dir) == stop_request.CANCELLED:
        stop_request.request(run_dir, stop_request.CANCELLED_NOW)
        print(f"asked {opts.run} again: its job is stopped now (rayfleet logs --run {opts.run} -f to watch)")
        return 0
    if state == "QUEUED" and run_dir.is_s3 and _cancel_waiting_for_a_slot(run_dir, opts.outputs):
        print(f"cancelled {opts.run}: it waited for a driver slot and never started")
        return 0
    stop_request.request(run_dir, stop_request.CANCELLED)
    what = "it leaves the queue" if state == "QUEUED" else "it checkpoints, then ends (cancel again: at once)"
    print(f"asked {opts.run} to stop: {what} (rayfleet logs --run {opts.run} -f to watch)")
    return 0


def _cancel_waiting_for_a_slot(run_dir, outputs: str | None) -> bool:
    """An ECS run whose trainer waits for a driver slot (rayfleet/core/launch_queue.py) leaves that queue."""
    from rayfleet.core.launch_queue import Launches
    from rayfleet.ecs.outputs import MissingOutputs, Outputs
    from rayfleet.targets.ecs_slot import cancel_waiting

    try:
        bucket = Outputs.load(outputs).results_bucket
    except MissingOutputs:  # nothing deployed: a local run
        return False
    return bool(bucket) and cancel_waiting(Launches.of_bucket(bucket), run_dir)


def _runs_dir(opts: argparse.Namespace) -> str:
    """Where the tracking verbs find the runs: --runs-dir, else the --bucket's, else where the first run lives."""
    if opts.runs_dir or opts.bucket:
        return opts.runs_dir or runs_root(opts.bucket)
    from rayfleet.ops.runs import locate

    return locate(opts.run[0]).storage


def plot(opts: argparse.Namespace) -> int:
    from rayfleet.ops.runs import plot as ops_plot

    return ops_plot.plot_runs(opts.run, _runs_dir(opts), Path(opts.out) if opts.out else None)


def dashboard(opts: argparse.Namespace) -> int:
    from rayfleet.ops.dashboard import dashboard as open_dashboard

    return open_dashboard(opts.local, opts.port, opts.run, opts.outputs, not opts.no_browser)


def tensorboard(opts: argparse.Namespace) -> int:
    from rayfleet.ops.runs import tensorboard as ops_tensorboard

    return ops_tensorboard.serve_tensorboard(opts.run, _runs_dir(opts), opts.port)


def infra(opts: argparse.Namespace) -> int:
    from rayfleet.ops.deploy import infra as ops_infra
    from rayfleet.ops.deploy.terraform_cli import DeploymentArgs

    args = DeploymentArgs(
        var_file=opts.var_file,
        image_tag=opts.image_tag,
        region=opts.region,
        yes=getattr(opts, "yes", False),
        force=getattr(opts, "force", False),
        delete_results=getattr(opts, "delete_results", False),
    )
    return ops_infra.run_deployment(opts.action, args)


def status(opts: argparse.Namespace) -> int:
    from rayfleet.ops import status as ops_status

    return ops_status.show_status(opts.runs, opts.json, opts.outputs)


def exec_(opts: argparse.Namespace) -> int:
    from rayfleet.ecs import shell

    return shell.open_shell(opts.node, opts.command, opts.outputs)


def stop(opts: argparse.Namespace) -> int:
    from rayfleet.ecs import stop as ecs_stop

    return ecs_stop.stop_deployment(opts.json, opts.outputs, opts.group)


def start(opts: argparse.Namespace) -> int:
    from rayfleet.ecs import start as ecs_start

    starts = {opts.group: None} if opts.group else None  # None: the group's max
    if opts.recipe:  # what the recipe needs on this deployment, refused here when it cannot fit at all
        from rayfleet.targets.ecs import starts_for

        starts = starts_for(opts.recipe, opts.outputs)
    return ecs_start.start_deployment(opts.timeout, starts, opts.outputs)


def images(opts: argparse.Namespace) -> int:
    from rayfleet.ops import images as ops_images

    return ops_images.build_or_push(opts.action, opts.images, opts.tag, opts.models, opts.outputs)


def token(opts: argparse.Namespace) -> int:
    from rayfleet.ecs import rotate_token

    return rotate_token.rotate_token(opts.force, opts.outputs)


def cluster(opts: argparse.Namespace) -> int:
    from rayfleet.local.cli import cluster_verb

    if opts.action == "run" and not opts.command:
        print("error: name the command: rayfleet cluster run -- python -m ...", file=sys.stderr)
        return EXIT_BAD_INPUT
    shape = (opts.workers, opts.cpus_per_worker, opts.gpus_per_worker, opts.gcs_store)
    return cluster_verb(opts.action, opts.command, *shape, groups=opts.group)


def serve(opts: argparse.Namespace) -> int:
    from rayfleet.ops import serve as ops_serve

    if opts.action == "up" and not opts.run:
        print("error: name the run to serve: rayfleet serve up --run NAME (rayfleet runs lists them)", file=sys.stderr)
        return EXIT_BAD_INPUT
    where = opts.runs_dir or (runs_root(opts.bucket) if opts.bucket else LOCAL_RUNS)
    return ops_serve.serve_verb(
        opts.action, opts.run, opts.on, opts.config, opts.set, opts.timeout, opts.outputs, runs_dir=where
    )


def rehearse(opts: argparse.Namespace) -> int:
    """The rehearsal is development tooling (tools/, never shipped): it runs from a rayfleet checkout."""
    if not Path("tools/rehearsal/__main__.py").is_file():
        print("error: the rehearsal runs from a rayfleet checkout (tools/rehearsal): cd into one", file=sys.stderr)
        return EXIT_BAD_INPUT
    return subprocess.call([sys.executable, "-m", "tools.rehearsal", opts.action, *opts.rest])
