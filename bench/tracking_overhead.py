"""What rank 0's tracking costs the DDP job per step (target: under 1% of the step time).

    python -m bench.tracking_overhead [--steps 40] [--rounds 3] [--batch 128]    # make bench BENCH=tracking

The job's own model and step (`rayfleet.train.ddp.build_model`, `train_epoch` on one CPU process, generated
FashionMNIST-format data), epochs of --steps steps, interleaved A B A B: without tracking, and with the
job's StepTracking (TensorBoard events into a scratch run directory, the step loss every
`log_every_steps`, a progress line when due). Also the tracking call alone, timed over many calls, so the
overhead is measured directly as well as by difference (which the machine's noise can swamp).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist

from rayfleet.core.config import load_config
from rayfleet.core.run_dir import RunDir
from rayfleet.train.data import fashion_mnist, synthetic
from rayfleet.train.data.device_batches import DeviceSplit
from rayfleet.train.ddp import Runtime, build_model, make_step, train_epoch
from rayfleet.train.ddp.config import DDPConfig
from rayfleet.train.ddp.report import StepTracking
from rayfleet.train.tracking.progress import Progress
from rayfleet.train.tracking.scalars import Scalars, Target

CPU = torch.device("cpu")


def tracking(cfg: DDPConfig, scratch: Path, steps: int, model) -> StepTracking:
    scalars = Scalars(RunDir(str(scratch), "bench"), Target(tensorboard=True), purge_step=1)
    return StepTracking(scalars, Progress(steps * 10, 0, cfg.progress_every_s), cfg, steps, 1, model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tracking_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    opts = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        synthetic.generate(root / "data", train=opts.steps * opts.batch, test=100, seed=1)
        cfg = load_config(DDPConfig, None, [f"data_dir={root / 'data'}", f"batch_size={opts.batch}"])
        dist.init_process_group("gloo", init_method=f"file://{root}/pg", rank=0, world_size=1)
        try:
            rt = Runtime.resolve(cfg, CPU)
            model, optimizer = build_model(cfg, rt)
            data = DeviceSplit(fashion_mnist.load(cfg.data_dir, train=True), CPU)
            track = tracking(cfg, root / "runs", opts.steps, model)
            times: dict[str, list[float]] = {"without": [], "with": []}
            step = make_step(model, optimizer, cfg, rt)
            train_epoch(step, data, cfg, rt, 1, 0, 1)  # warm-up
            for epoch in range(2, 2 + opts.rounds):
                track.epoch = epoch  # as the job sets it: the step count (and the rate) runs on
                for label, on_step in (("without", None), ("with", track)):
                    start = time.perf_counter()
                    train_epoch(step, data, cfg, rt, epoch, 0, 1, on_step)
                    times[label].append((time.perf_counter() - start) / opts.steps)
            loss = torch.tensor(1.0)
            calls = 10 * cfg.log_every_steps
            start = time.perf_counter()
            for step in range(1, calls + 1):
                track(step, loss)
            per_call = (time.perf_counter() - start) / calls
            track.scalars.close()
        finally:
            dist.destroy_process_group()
    step_s = statistics.median(times["without"])
    with_s = statistics.median(times["with"])
    print(f"DDP step on CPU, batch {opts.batch}, {opts.steps} steps x {opts.rounds} rounds (median s/step)")
    print(f"{'variant':<28}{'s/step':>10}{'vs without':>12}")
    print(f"{'without tracking':<28}{step_s:>10.4f}{'1.000x':>12}")
    print(f"{'with tracking':<28}{with_s:>10.4f}{with_s / step_s:>11.3f}x")
    print(
        f"tracking call alone: {per_call * 1e6:,.1f} us/step = {per_call / step_s:.4%} of a step "
        f"(incl. the step loss and gradient norm to TensorBoard every {cfg.log_every_steps} steps)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
