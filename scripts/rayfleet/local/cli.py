"""`python -m rayfleet.local up|down|status|env|run|replace-head` (the cluster itself: cluster.py)."""

from __future__ import annotations

import argparse
import os
import sys

from rayfleet.core import ray_auth
from rayfleet.core.arg_bounds import float_in, int_in
from rayfleet.core.errors import EXIT_BAD_INPUT
from rayfleet.local import cluster, head_loss
from rayfleet.local.host import ClusterError, shell_exports


def main(argv: list[str] | None = None) -> int:
    ray_auth.use_token_auth()  # before anything imports ray: Ray reads its auth mode once, at import
    parser = argparse.ArgumentParser(prog="python -m rayfleet.local", description=cluster.__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    up_p = sub.add_parser("up", help="start head + workers")
    run_p = sub.add_parser("run", help="run a command on the cluster (starting and stopping one if none runs)")
    for p in (up_p, run_p):
        # bounded in the parser (exit 2); the cluster's own limits (cluster.ClusterSpec.validate) also exit 2
        p.add_argument("--workers", type=int_in(1, 10_000))
        p.add_argument("--cpus-per-worker", type=float_in(0, 1024, low_open=True))
        p.add_argument("--gpus-per-worker", type=int_in(0, 64))
        p.add_argument(
            "--gcs-store",
            action="store_true",
            default=None,
            help="keep the GCS in a local redis-server, so `replace-head` can replace a killed head "
            "(default: $RAYFLEET_GCS_STORE)",
        )
    run_p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    sub.add_parser("down", help="stop what `up` started")
    sub.add_parser("status", help="what is running")
    sub.add_parser("replace-head", help="SIGKILL the head and start a new one on the same GCS store")
    sub.add_parser("env", help="print shell exports for Ray's clients: RAY_ADDRESS, the Jobs API, token auth")
    args = parser.parse_args(argv)
    try:
        if args.verb in ("up", "run"):
            try:
                spec = cluster.ClusterSpec.from_env(
                    workers=args.workers,
                    cpus_per_worker=args.cpus_per_worker,
                    gpus_per_worker=args.gpus_per_worker,
                    gcs_store=args.gcs_store,
                )
            except ClusterError as exc:  # a shape the cluster refuses: bad input, before anything started
                print(f"error: rayfleet cluster {args.verb}: {exc}", file=sys.stderr)
                return EXIT_BAD_INPUT
            if args.verb == "run":
                return cluster.run(args.command, spec)
            cluster.up(spec)
        elif args.verb == "down":
            cluster.down()
        elif args.verb == "status":
            print(cluster.status())
        elif args.verb == "replace-head":
            print(f"head replaced: every node alive on the new head after {head_loss.replace_head():.1f}s", flush=True)
        elif args.verb == "env":
            state = cluster.running()
            if state is None:
                raise ClusterError("no rayfleet cluster is running; run `make cluster-up`")
            print("\n".join(shell_exports(state, dict(os.environ))))
    except (ClusterError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
