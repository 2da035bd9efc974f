"""The Ray cluster bench.gpu runs its jobs on: the local cluster (`rayfleet.local`), or one bare head where
Ray's dashboard packages are missing; started, reached and stopped here."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

from bench import gpu_report as report
from bench.gpu_run import Clock, free_port


def running_cluster():
    from rayfleet.local import cluster as local_cluster

    return local_cluster.running()


def start_cluster(cpus: float, gpus: int, clock: Clock):
    """(the cluster's state, how it was started: "" reused, "local" or "bare"); raises ClusterError and Ray's
    errors. The local cluster needs Ray's dashboard (its node list comes from the state API); where Ray is
    carried without the dashboard's packages (the lent GPU machines) one head node without a dashboard,
    holding every CPU and GPU, takes its place."""
    from rayfleet.local import cluster as local_cluster

    state = local_cluster.running()
    if state is not None:
        clock.say(f"using the running local cluster at {state.address} ({state.spec})")
        return state, ""
    spec = local_cluster.ClusterSpec.from_env(workers=1, cpus_per_worker=cpus, gpus_per_worker=gpus)
    clock.say(f"starting a local Ray cluster: 1 worker x {cpus:g} CPU, {gpus} GPU ...")
    try:
        state = local_cluster.up(spec, quiet=True)
    except Exception as exc:
        clock.say(f"the local cluster did not start ({report.last_error_line(str(exc))}); starting one bare head")
        with contextlib.suppress(Exception):
            local_cluster.down(quiet=True)
        return start_bare_head(cpus, gpus), "bare"
    clock.say(f"cluster up at {state.address}")
    return state, "local"


def start_bare_head(cpus: float, gpus: int) -> dict:
    """One Ray head on 127.0.0.1 with every resource, token auth, no dashboard: the job env to reach it."""
    from rayfleet.core import ray_auth, ray_start
    from rayfleet.local.host import ray_cli

    port = free_port()
    env = {**os.environ, **ray_auth.auth_env()}
    resources = {"num_cpus": int(cpus), "num_gpus": gpus}
    extra = ["--node-ip-address=127.0.0.1", "--include-dashboard=false"]
    cmd = ray_start.command(head=True, ports={"gcs": port}, resources=resources, extra=extra, ray=ray_cli())
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, timeout=180)
    return {**env, "RAY_ADDRESS": f"127.0.0.1:{port}", "PYTHONUNBUFFERED": "1"}


def stop_cluster(clock: Clock, how: str) -> None:
    from rayfleet.local import cluster as local_cluster

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave half a cluster
    try:
        if how == "bare":
            from rayfleet.local.host import ray_cli

            subprocess.run([ray_cli(), "stop", "--force"], capture_output=True, timeout=120, check=False)
        else:
            local_cluster.down(quiet=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    clock.say("cluster down")


def job_env(state) -> dict:
    if isinstance(state, dict):  # a bare head's env (start_bare_head)
        return state
    from rayfleet.local.processes import command_env

    return {**command_env(state), "PYTHONUNBUFFERED": "1"}
