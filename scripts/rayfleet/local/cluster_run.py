"""`rayfleet cluster run -- CMD`: a command on the running local cluster, or on one started for it and stopped
when it ends (rayfleet/local/cluster.py)."""

from __future__ import annotations

import signal

from rayfleet.core import ray_auth, warm_workers
from rayfleet.local import cluster
from rayfleet.local.host import ClusterError
from rayfleet.local.processes import command_env, run_command


def run(command: list[str], spec: cluster.ClusterSpec) -> int:
    """Run `command` on the running rayfleet cluster, or on one of `spec`'s shape started for it and
    stopped when the command ends (Ctrl-C included). A cluster that was already running is left running."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ClusterError("run needs a command: rayfleet cluster run [--workers N] -- CMD ...")
    ray_auth.use_token_auth()
    state = cluster.running()
    started = state is None
    if started:
        print("no rayfleet cluster running: starting one for this command (stopped when it ends)", flush=True)
        state = cluster.up(spec)
    env = command_env(state)
    if not state.store:  # a driver forked from the head's warm server (never where the head can be replaced)
        command, env = (
            warm_workers.launched(command),
            {**env, warm_workers.SOCKET_ENV: str(cluster.warm_dir(state) / "head.sock")},
        )
    try:
        return run_command(command, env)
    finally:
        if started:
            _down_uninterrupted()


def _down_uninterrupted() -> None:
    """`down`, with Ctrl-C ignored meanwhile: an impatient second Ctrl-C must not leave half a cluster."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        cluster.down(quiet=True)
    finally:
        signal.signal(signal.SIGINT, previous)
