"""The local cluster's processes from outside: finding exactly its own (by session and marker, also after a
crash), signalling them, and running a command against it with the exit code a shell would give."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from rayfleet.local import gcs_store
from rayfleet.local.host import ClusterError, client_env, venv_first

if TYPE_CHECKING:  # annotations only: cluster.py imports this module
    from rayfleet.local.cluster import ClusterState


OWN_PROGRAMS = (b"ray", b"redis-server")


def find_cluster_pids(cluster_id: str, sessions: list[int] = ()) -> list[int]:
    """Live processes of this cluster: those whose environment carries its id, and Ray processes in
    the sessions of its `ray start` nodes (Ray's agents rename themselves, which wipes their environ), and its
    GCS store's redis-server in its own."""
    needle = f"RAYFLEET_CLUSTER_ID={cluster_id}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            state, session = fields[0], int(fields[3])
            if state in "ZX":
                continue
            marked = needle in (entry / "environ").read_bytes().split(b"\0")
            # redis-server (the GCS store) writes its title over its environment: known by its session
            ours = session in sessions and any(name in (entry / "cmdline").read_bytes() for name in OWN_PROGRAMS)
            if marked or ours:
                pids.append(int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # gone while we looked, or not ours to read
    return pids


def signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def command_env(state: ClusterState) -> dict[str, str]:
    """The environment `run` gives its command: this one, pointed at the cluster like `env` would."""
    env = {**os.environ, **client_env(state)}
    env.pop("RAY_AUTH_TOKEN", None)  # Ray would prefer it to the cluster's token file
    env["PATH"] = venv_first(env.get("PATH", ""))
    if state.store:  # its drivers wait for a replaced head, as its nodes do
        env.update(gcs_store.nodes_env())
    return env


def exit_code(returncode: int) -> int:
    """A shell's exit code for a child's return code: killed by signal N is 128 + N, as bash reports it."""
    return 128 - returncode if returncode < 0 else returncode


def run_command(command: list[str], env: dict[str, str]) -> int:
    """Run `command` to its end and return its exit code.

    Ctrl-C in a terminal reaches the command too (same process group), so it is not sent again: a second
    SIGINT would cut the command's own cleanup short (a Ray job it stops, a checkpoint it writes). SIGTERM,
    which is sent to this process alone (make, a CI timeout), is passed on."""
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as exc:
        raise ClusterError(f"cannot run {command[0]}: {exc.strerror}") from None
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))
    try:
        while True:
            try:
                return exit_code(proc.wait())
            except KeyboardInterrupt:
                continue  # the command got the Ctrl-C as well; its exit ends the wait
    finally:
        signal.signal(signal.SIGTERM, previous)
