"""`rayfleet cluster up|down|status|env|run|replace-head`: the verb's one call (the cluster itself: cluster.py)."""

from __future__ import annotations

import os
import sys

from rayfleet.core import ray_auth
from rayfleet.core.errors import EXIT_BAD_INPUT
from rayfleet.core.moved import gone
from rayfleet.local import cluster, cluster_run, head_loss
from rayfleet.local.host import ClusterError, shell_exports


def cluster_verb(
    action: str,
    command: list[str] | None = None,
    workers: int | None = None,
    cpus_per_worker: float | None = None,
    gpus_per_worker: int | None = None,
    gcs_store: bool | None = None,
    groups: list[tuple[str, int, int]] | None = None,
) -> int:
    """One action on the local cluster. `up`/`run` take its shape (None: $RAYFLEET_* or the defaults; a
    `gcs_store` of None: $RAYFLEET_GCS_STORE); `run` runs `command` on it, starting and stopping one if none
    runs, and returns the command's own exit code. `groups`: (name, nodes, GPUs per node) each, labelled
    worker nodes in place of `workers` x `gpus_per_worker` (rayfleet/core/worker_groups.py)."""
    ray_auth.use_token_auth()  # before anything imports ray: Ray reads its auth mode once, at import
    try:
        if action in ("up", "run"):
            try:
                spec = cluster.ClusterSpec.from_env(
                    workers=workers,
                    cpus_per_worker=cpus_per_worker,
                    gpus_per_worker=gpus_per_worker,
                    gcs_store=gcs_store,
                    groups=[list(g) for g in groups] if groups else None,
                )
            except ClusterError as exc:  # a shape the cluster refuses: bad input, before anything started
                print(f"error: rayfleet cluster {action}: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
            if action == "run":
                return cluster_run.run(command or [], spec)
            cluster.up(spec)
        elif action == "down":
            cluster.down()
        elif action == "status":
            print(cluster.status())
        elif action == "replace-head":
            print(f"head replaced: every node alive on the new head after {head_loss.replace_head():.1f}s", flush=True)
        elif action == "env":
            state = cluster.running()
            if state is None:
                raise ClusterError("no rayfleet cluster is running; run `rayfleet cluster up`")
            print("\n".join(shell_exports(state, dict(os.environ))))
    except (ClusterError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.local.cli", "rayfleet cluster")
