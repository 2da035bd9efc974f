"""Seconds of training held up per checkpoint: synchronous against asynchronous saves, the real jobs.

    python -m bench.checkpoint_pause [--jobs fsdp ddp] [--fsdp-set key=value ...]     # make bench BENCH=checkpoint

Each job runs twice on one local Ray cluster (the running `rayfleet cluster up`, else 2 workers x 1 CPU started
here), once with `async_checkpoint=false` and once with `true`, everything else equal, and the table reads
the pauses from the runs' own metrics rows (`checkpoint_pause_s`: from the loop's save call to its return):
  fsdp: the tiny GPT-NeoX (`make text-data`), a sharded checkpoint every 10 steps (DCP: synchronous `save`
        against `async_save`, whose files are written from a thread and then uploaded by Ray Train's thread);
  ddp:  ResNet-18 on the generated FashionMNIST (`make data`), one checkpoint an epoch (rank 0's
        `torch.save` and upload in the loop, against the write alone with Ray Train uploading it).
On a GPU, the pythia-1.4b shape: `--fsdp-config <yaml> --fsdp-set ...` with the GPU config bench.gpu uses
(bench/gpu_plan.py); `--storage s3://...` puts the upload on the network, where the two differ most.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.on_cluster import local_cluster_state
from rayfleet.core.run_dir import RunDir
from rayfleet.local.processes import command_env
from rayfleet.train.metrics import read_rows

REPO = Path(__file__).resolve().parents[1]
FSDP_TINY = ["max_steps=40", "checkpoint_every=10", "log_every=10", "export=false", "warmup_steps=2"]
DDP_SMALL = ["epochs=3", "train_subset=2048", "test_subset=512", "eval_batch_size=512", "progress_every_s=0"]


FSDP_CONFIG = "rayfleet/train/configs/fsdp-tiny.yaml"


def job_command(job: str, args: argparse.Namespace, storage: str, run: str, mode: bool) -> list[str]:
    common = [f"storage={storage}", f"run_name={run}", f"async_checkpoint={str(mode).lower()}"]
    if job == "ddp":
        return [sys.executable, "-m", "rayfleet.train.ddp", f"data_dir={args.data}", *DDP_SMALL, *common]
    text = [f"model={args.model}", f"data={args.text}"] if args.fsdp_config == FSDP_CONFIG else []
    command = [sys.executable, "-m", "rayfleet.train.fsdp", "--config", args.fsdp_config, *text, *FSDP_TINY]
    return [*command, *common, *args.fsdp_set]


def pauses(job: str, args, env: dict, storage: str, mode: bool) -> list[float]:
    run = f"pause-{job}-{'async' if mode else 'sync'}"
    command = job_command(job, args, storage, run, mode)
    print(f"{job}, async_checkpoint={str(mode).lower()} ...", flush=True)
    result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"{job} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    rows = read_rows(RunDir(storage, run))
    found = [row["checkpoint_pause_s"] for row in rows if "checkpoint_pause_s" in row]
    if not found:
        raise SystemExit(f"{job}: no checkpoint_pause_s in {len(rows)} metrics rows")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", nargs="+", choices=["fsdp", "ddp"], default=["fsdp", "ddp"])
    parser.add_argument("--data", type=Path, default=REPO / "data", help="FashionMNIST-format data (make data)")
    parser.add_argument("--model", type=Path, default=REPO / "models" / "tiny-gpt-neox", help="make text-data")
    parser.add_argument("--text", type=Path, default=REPO / "data" / "text" / "tiny_shakespeare.txt")
    parser.add_argument("--fsdp-config", default=FSDP_CONFIG)
    parser.add_argument("--fsdp-set", nargs="*", default=[], help="more rayfleet.train.fsdp overrides")
    parser.add_argument("--storage", help="where the runs go (a local directory or s3://...); default: a temp dir")
    args = parser.parse_args(argv)
    missing = [
        f"{what} ({how})"
        for job, what, how in [
            ("ddp", args.data / "FashionMNIST", "make data"),
            ("fsdp", args.model / "config.json", "make text-data"),
        ]
        if job in args.jobs and (job != "fsdp" or args.fsdp_config == FSDP_CONFIG) and not what.exists()
    ]
    if missing:
        print(f"error: missing {', '.join(missing)}", file=sys.stderr)
        return 2
    args.data, args.model, args.text = args.data.resolve(), args.model.resolve(), args.text.resolve()
    figures: dict[tuple[str, bool], list[float]] = {}
    with local_cluster_state() as state, tempfile.TemporaryDirectory() as tmp:
        env = {**command_env(state), "PYTHONUNBUFFERED": "1"}
        for job in args.jobs:
            for mode in (False, True):
                figures[job, mode] = pauses(job, args, env, args.storage or tmp, mode)
    print("\nseconds the training loop was held up per checkpoint (median, max; n checkpoints)")
    print("| job | synchronous | asynchronous | sync / async |")
    print("|---|---|---|---|")
    for job in args.jobs:
        sync, asyn = figures[job, False], figures[job, True]
        cells = [f"{statistics.median(f):.3f} s, {max(f):.3f} s (n={len(f)})" for f in (sync, asyn)]
        ratio = statistics.median(sync) / max(statistics.median(asyn), 1e-9)
        print(f"| {job} | {cells[0]} | {cells[1]} | {ratio:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
