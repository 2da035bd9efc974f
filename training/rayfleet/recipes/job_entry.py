"""The first thing a recipe job runs, in the job's own process: resolve its secrets, wait its turn in the
cluster's queue when it has one (--queue: rayfleet/recipes/admission.py), then exec its command, or
run it as a child: watched when the run notifies (RAYFLEET_NOTIFY: the run's name and stall time, watch.py),
and while a queued run keeps its entry.

    python -m rayfleet.recipes.job_entry '<the recipe command, for /bin/sh>'   # as rayfleet.recipes.job submits it

RAYFLEET_SECRET_REFS (name -> reference, never a value; rayfleet/recipes/secrets.py) is resolved here,
through the AWS adapter with this process's credentials (the trainer's task role on ECS), and the command
is exec'd with the values in its environment: the job's process and its children (torchrun, a setup
command) see them; Ray never does, so they are in no Ray log, the GCS or a Jobs API answer.

Ray's own worker processes (Ray tasks, actors, Ray Train workers) are started by Ray with the job's
runtime_env, which holds the references only. A train loop that needs a value resolves the references
itself, first thing in the loop, with the worker's own credentials (on ECS the same task role):

    from rayfleet.recipes.job_entry import load_secrets
    load_secrets()          # os.environ gets every value of RAYFLEET_SECRET_REFS

Passing values from the driver to the workers (a train_loop_config, a closure) would put them in Ray's
task specs and object store, so rayfleet does not.
"""

from __future__ import annotations

import json
import os
import sys

from rayfleet.core import worker_groups
from rayfleet.core.aws import run_cli
from rayfleet.core.errors import RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import admission
from rayfleet.recipes.notify import NOTIFY_VAR, TOPIC_VAR, WEBHOOK_VAR, Notifier
from rayfleet.recipes.secrets import REFS_VAR, resolve
from rayfleet.recipes.watch import Watch, run_watched


def refs_from_env(env: dict | None = None) -> dict[str, str]:
    text = (os.environ if env is None else env).get(REFS_VAR) or "{}"
    try:
        refs = json.loads(text)
    except json.JSONDecodeError:
        raise RayfleetError(f"{REFS_VAR} is not JSON") from None
    if not isinstance(refs, dict) or not all(isinstance(v, str) for v in refs.values()):
        raise RayfleetError(f"{REFS_VAR} is not a map of names to references")
    return refs


def load_secrets() -> list[str]:
    """Resolve RAYFLEET_SECRET_REFS into os.environ (in a Ray worker, say); returns the names set."""
    values = resolve(refs_from_env())
    os.environ.update(values)
    return sorted(values)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    queued, move = None, None
    if len(argv) == 3 and argv[0] == "--queue":
        queued, move, argv = admission.parse(argv[1], os.environ), admission.move_of(argv[1]), argv[2:]
    if len(argv) != 1:
        raise RayfleetError("usage: python -m rayfleet.recipes.job_entry [--queue '<spec>'] '<command>'")
    env = {**os.environ, **resolve(refs_from_env())}
    notify = json.loads(os.environ.get(NOTIFY_VAR) or "null")
    if queued is not None:
        queue, entry = queued
        run_dir = RunDir(env["RAYFLEET_STORAGE"], env["RAYFLEET_RUN_NAME"])
        admitted = admission.admit(queue, entry, run_dir, move)
        if isinstance(admitted, str):
            return admission.cancelled_exit(entry.run, admitted)
        if entry.group:  # where it was admitted: its drivers place the workers there (recipes/group_move.py)
            env[worker_groups.GROUP_VAR] = entry.group
        with admission.holding(queue, entry, admitted):
            return _run(argv[0], env, notify, child=True)
    return _run(argv[0], env, notify, child=False)


def _run(command: str, env: dict, notify: dict | None, child: bool) -> int:
    if notify:
        notifier = Notifier(env.get(TOPIC_VAR) or None, env.get(WEBHOOK_VAR) or None)
        return run_watched(command, env, Watch(notifier, notify["run"], float(notify["stall_after_s"])))
    if child:
        return admission.run_child(command, env)
    sys.stdout.flush()
    os.execve("/bin/sh", ["/bin/sh", "-c", command], env)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(run_cli(main))
