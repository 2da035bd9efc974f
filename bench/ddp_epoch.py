"""Seconds per epoch and images/s of the DDP job, as a table.

    make bench BENCH=ddp                                   # 2 epochs, 2 workers, full 60k training set
    python -m bench.ddp_epoch --epochs 3 --workers 2 --train-subset 12000
    RAY_ADDRESS=... python -m bench.ddp_epoch --device cuda --workers 1 --compile

Runs the real job (rayfleet.train.ddp) on the local cluster (or RAY_ADDRESS) into a scratch storage directory
and reads its metrics.jsonl. The first epoch includes warm-up (allocation, compilation); the steady-state
row is the mean of the later epochs.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from rayfleet.core import ray_auth


def _row(label: str, rows: list[dict]) -> str:
    n = len(rows)
    mean = {k: sum(r[k] for r in rows) / n for k in ("epoch_s", "train_s", "images_per_s", "images_per_s_per_worker")}
    last = rows[-1]
    return (
        f"| {label:<12} | {mean['epoch_s']:>8.2f} | {mean['train_s']:>8.2f} | {mean['images_per_s']:>10,.0f} "
        f"| {mean['images_per_s_per_worker']:>10,.0f} | {last['test_accuracy']:>8.4f} "
        f"| {last['workers']} x {last['device']:<4} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cpus-per-worker", type=float, default=1.0)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--train-subset", type=int, default=None)
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--compile-mode", default="default")
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    ray_auth.use_token_auth()  # before rayfleet.train.ddp imports ray: Ray reads its auth mode once
    from rayfleet.train.ddp import main as ddp_main

    with tempfile.TemporaryDirectory(prefix="rayfleet-bench-") as storage:
        overrides = [
            f"epochs={args.epochs}",
            f"num_workers={args.workers}",
            f"cpus_per_worker={args.cpus_per_worker}",
            f"batch_size={args.batch_size}",
            f"device={args.device}",
            f"compile={str(args.compile).lower()}",
            f"compile_mode={args.compile_mode}",
            f"data_dir={args.data_dir}",
            f"storage={storage}",
            "run_name=bench",
            "max_failures=0",
            "keep_checkpoints=1",
        ]
        if args.train_subset:
            overrides.append(f"train_subset={args.train_subset}")
        code = ddp_main(overrides)
        if code != 0:
            return code
        rows = [json.loads(line) for line in (Path(storage) / "bench" / "metrics.jsonl").read_text().splitlines()]

    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print()
    print("| epochs       |  epoch s |  train s |   images/s | img/s/wkr  | test acc | workers   |")
    print("|--------------|----------|----------|------------|------------|----------|-----------|")
    print(_row("1 (warm-up)", rows[:1]))
    if len(rows) > 1:
        print(_row(f"2-{len(rows)} (mean)", rows[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
