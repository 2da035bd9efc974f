"""Whether the DDP job's precision levers learn like fp32: the bf16 gradient all-reduce and bf16 autocast.

    python -m bench.speed_levers_learning                    # make bench BENCH=speed-levers
    python -m bench.speed_levers_learning --train-images 3000 --epochs 5 --levers grad-bf16

The job's own model, optimizer, step and evaluation (`rayfleet.train.ddp.build_model`, `parallelize`,
`train_epoch`, `evaluate`) in one CPU process (a gloo group of one: the DDP wrapper and its communication
hook run as in the job; the hook rounds each gradient to bf16), from the same seeded initialization and
data order for every variant: plain fp32, then each lever. Prints the train loss of the first and last
epoch, the test accuracy after the last, and whether the lever learned like fp32 by the criteria below
(those of the unit test this replaces, which trained the same way for minutes). That each lever works,
step by step, is tested in tests/unit/train/test_ddp_speed_levers.py; their speed is measured,
interleaved, by bench/vs_blueprint.py (the variants here run one after another, so their seconds are
printed as progress only).

On a CPU without AVX512-BF16 or AMX, bf16 autocast is emulated and several times slower than fp32.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from rayfleet.core.config import load_config
from rayfleet.train.data import fashion_mnist
from rayfleet.train.data.device_batches import DeviceSplit
from rayfleet.train.ddp import Runtime, build_model, evaluate, make_step, train_epoch
from rayfleet.train.ddp.config import DDPConfig
from rayfleet.train.parallel import parallelize
from rayfleet.train.precision import cpu_has_native_bf16

CPU = torch.device("cpu")
PLAIN = ("fp32", ["precision=fp32"])
LEVERS = {"grad-bf16": ["precision=fp32", "grad_compression=bf16"], "autocast-bf16": ["precision=bf16"]}


@dataclass(frozen=True)
class Run:
    losses: list[float]  # the mean train loss of each epoch
    accuracy: float  # on the test images, after the last epoch

    def learned(self) -> bool:
        """The loss fell by a fifth over the epochs, and the accuracy is well above chance (0.1)."""
        return self.losses[-1] < self.losses[0] * 0.8 and self.accuracy > 0.4

    def learned_like(self, plain: Run) -> bool:
        """As far as fp32: a last-epoch loss within 10% of fp32's, an accuracy at most 5 points below."""
        return self.learned() and self.losses[-1] < plain.losses[-1] * 1.1 and self.accuracy >= plain.accuracy - 0.05


def train(cfg: DDPConfig, train_data: DeviceSplit, test_data: DeviceSplit, epochs: int) -> Run:
    rt = Runtime.resolve(cfg, CPU)
    torch.manual_seed(0)  # the same initialization for every variant
    model, optimizer = build_model(cfg, rt)
    wrapped = parallelize(model, CPU, "ddp", grad_compression=cfg.grad_compression, bucket_cap_mb=cfg.bucket_cap_mb)
    step = make_step(wrapped, optimizer, cfg, rt)
    torch.manual_seed(1)
    losses = []
    for epoch in range(1, epochs + 1):
        loss_sum, seen, _ = train_epoch(step, train_data, cfg, rt, epoch, 0, 1)
        losses.append(float(loss_sum) / seen)
    _, correct, tested = evaluate(model, test_data, cfg, rt, 0, 1)
    return Run(losses, float(correct) / tested)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.speed_levers_learning", description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--train-images", type=int, default=1152, help="the first N training images")
    parser.add_argument("--test-images", type=int, default=300, help="the first N test images")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--levers", nargs="+", choices=sorted(LEVERS), default=list(LEVERS))
    opts = parser.parse_args(argv)

    def config(overrides: list[str]) -> DDPConfig:
        base = [f"data_dir={opts.data_dir}", f"batch_size={opts.batch_size}", f"lr={opts.lr}", "eval_batch_size=100"]
        return load_config(DDPConfig, None, [*base, *overrides])

    cfg = config([])
    train_data = DeviceSplit(fashion_mnist.load(cfg.data_dir, train=True).head(opts.train_images), CPU)
    test_data = DeviceSplit(fashion_mnist.load(cfg.data_dir, train=False).head(opts.test_images), CPU)
    variants = [PLAIN, *((name, LEVERS[name]) for name in opts.levers)]
    runs: dict[str, Run] = {}
    with tempfile.TemporaryDirectory(prefix="rayfleet-bench-") as scratch:
        dist.init_process_group("gloo", init_method=f"file://{scratch}/pg", rank=0, world_size=1)
        try:
            for name, overrides in variants:
                print(f"{name} ({' '.join(overrides)}) ...", end=" ", flush=True)
                start = time.perf_counter()
                runs[name] = train(config(overrides), train_data, test_data, opts.epochs)
                print(f"{time.perf_counter() - start:.0f} s", flush=True)
        finally:
            dist.destroy_process_group()

    plain = runs[PLAIN[0]]
    print(
        f"\n{len(train_data):,} train / {len(test_data):,} test images of {fashion_mnist.describe(cfg.data_dir)}, "
        f"{opts.epochs} epochs of batch {opts.batch_size}, Adam lr {opts.lr}, 1 CPU process "
        f"({torch.get_num_threads()} threads; native bf16: {'yes' if cpu_has_native_bf16() else 'no, emulated'})"
    )
    print("| variant | overrides | train loss, epoch 1 | last epoch | test acc | learns like fp32 |")
    print("|---|---|---|---|---|---|")
    for name, overrides in variants:
        run = runs[name]
        if run is plain:
            verdict = f"(the baseline; it learned: {'yes' if run.learned() else 'NO'})"
        else:
            verdict = "yes" if run.learned_like(plain) else "NO"
        print(
            f"| {name} | {' '.join(overrides)} | {run.losses[0]:.4f} | {run.losses[-1]:.4f} | {run.accuracy:.4f} "
            f"| {verdict} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
