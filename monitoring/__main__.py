"""GPU metrics sidecar: NVML -> CloudWatch. The gpu-metrics image's entry point.

    python -m monitoring                      # sample every 10 s, publish every 60 s, until SIGTERM
    python -m monitoring --once               # print one sample of every GPU as JSON and exit
    python -m monitoring --idle-without-gpu   # on a CPU node group: log once, then only follow the runs

The run using this node's GPUs is read at every sample from the current-run files the training workers
write in --run-dir (default $RAYFLEET_CURRENT_RUN_DIR; monitoring/current_run.py has the contract), and
becomes the RunName of the per-run rollup. Each change is logged as `runs_changed`, also when idle.

Exit codes: 0 stopped cleanly, 2 bad arguments, 3 no NVML library or no GPU (without --idle-without-gpu).
Region and credentials come from the standard AWS chain (the task role on ECS).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from monitoring import spec as metric_spec
from monitoring.current_run import current_runs, directory_from
from monitoring.identity import discover
from monitoring.log import log
from monitoring.nvml_sampler import NoGPU, NvmlSampler

EXIT_NO_GPU = 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m monitoring", description=__doc__.split("\n")[0])
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples (default 10)")
    parser.add_argument("--publish-interval", type=float, default=60.0, help="seconds between publishes")
    parser.add_argument("--once", action="store_true", help="print one sample as JSON and exit")
    parser.add_argument("--idle-without-gpu", action="store_true", help="idle instead of exiting when no GPU")
    parser.add_argument("--high-resolution", action="store_true", help="store at 1 s resolution (costs more)")
    parser.add_argument("--max-buffered", type=int, default=20_000, help="datums kept while CloudWatch is away")
    parser.add_argument("--region", default=None, help="AWS region (default: the AWS chain)")
    parser.add_argument(
        "--run-dir",
        default=directory_from(os.environ),
        help="the current-run files of the training workers (default: $RAYFLEET_CURRENT_RUN_DIR)",
    )
    parser.add_argument(
        "--health-dir",
        default=os.environ.get("RAYFLEET_HEALTH_DIR") or None,
        help="where a bad GPU marks this node suspect for the Ray worker (default: $RAYFLEET_HEALTH_DIR; none: off)",
    )
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.publish_interval < args.interval:
        parser.error("need 0 < --interval <= --publish-interval")
    if args.max_buffered < 1:
        parser.error("--max-buffered must be at least 1")
    return args


def follow_runs_idle(run_dir: str | None, interval: float, stop: threading.Event) -> None:
    """Without a GPU nothing is published, but the runs on the node are still followed and logged."""
    current: list[str] = []
    while True:
        runs = current_runs(run_dir)
        if runs != current:
            log("runs_changed", runs=runs, previous=current)
            current = runs
        if not run_dir or stop.wait(interval):
            break
    stop.wait()


def main(argv: list[str] | None = None, nvml=None) -> int:
    args = parse_args(argv)
    if nvml is None:
        import pynvml as nvml
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        sampler = NvmlSampler(nvml)
    except NoGPU as exc:
        if not args.idle_without_gpu:
            print(f"error: {exc}; run on a GPU instance, or pass --idle-without-gpu", file=sys.stderr)
            return EXIT_NO_GPU
        log("no_gpu_idle", level="warning", reason=str(exc), run_dir=args.run_dir)
        follow_runs_idle(args.run_dir, args.interval, stop)
        return 0
    identity = discover()
    if args.once:
        samples = sampler.sample()
        print(
            json.dumps(
                {
                    "identity": identity.__dict__,
                    "gpus": [
                        {"index": s.index, "name": s.name, "throttle_reasons": s.throttle_reasons, **s.values}
                        for s in samples
                    ],
                },
                indent=2,
            )
        )
        sampler.close()
        return 0

    import boto3
    from botocore.config import Config

    from monitoring.publisher import Publisher
    from monitoring.sidecar import Sidecar

    spec = metric_spec.load()
    # Our own backoff keeps sampling going; botocore only retries a request once, quickly.
    client = boto3.client(
        "cloudwatch",
        region_name=args.region,
        config=Config(retries={"total_max_attempts": 2, "mode": "standard"}, connect_timeout=3, read_timeout=10),
    )
    publisher = Publisher(client, spec.namespace, max_buffered=args.max_buffered)
    runs = (lambda: current_runs(args.run_dir)) if args.run_dir else None  # else RAYFLEET_RUN_NAME, fixed
    sidecar = Sidecar(
        sampler,
        publisher,
        identity,
        spec,
        args.interval,
        args.publish_interval,
        args.high_resolution,
        runs=runs,
        health_dir=args.health_dir,
    )
    try:
        sidecar.run(stop)
    finally:
        sampler.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
