"""DDP: ResNet-18 on FashionMNIST with Ray Train, data-parallel over N workers.

Local, on a laptop (starts its own Ray cluster unless one runs; `make data` first for generated data):
    python -m rayfleet.train.ddp                                   # rayfleet/train/configs/ddp.yaml
    python -m rayfleet.train.ddp epochs=3 train_subset=12000       # any key=value overrides the YAML
    make train-ddp ON=local ARGS="epochs=3"
On a running Ray cluster (rayfleet cluster up, or any cluster with token auth):
    RAY_ADDRESS=127.0.0.1:6390 python -m rayfleet.train.ddp storage=s3://my-bucket/runs
On ECS (the trainer task runs this module inside the VPC; see rayfleet/ecs/launch.py):
    make train-ddp BUCKET=my-bucket
Re-running with the same run_name resumes from that run's latest checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
import torch.nn.functional as F

from rayfleet.core.config import ConfigError, load_config
from rayfleet.core.errors import EXIT_BAD_INPUT
from rayfleet.core.ledger import EVENT, Phases
from rayfleet.core.run_dir import RunDir
from rayfleet.train import checkpoint
from rayfleet.train.control import compile_guard, hang_watch
from rayfleet.train.control.preemption import Preemption, steps_between_checks
from rayfleet.train.control.run_control import RunControl
from rayfleet.train.data import fashion_mnist
from rayfleet.train.data import staged as staged
from rayfleet.train.data.device_batches import DeviceSplit, steps_per_epoch
from rayfleet.train.ddp.config import DDPConfig, Runtime
from rayfleet.train.ddp.phases import account_steps, loader_waits
from rayfleet.train.ddp.reduce import all_sum
from rayfleet.train.ddp.report import announce, epoch_row, epoch_scalars, rank0_tracking
from rayfleet.train.ddp.state import (
    EpochPosition,
    position_at,
    redone_steps,
    resume,
    save_at_preemption,
    save_epoch,
)
from rayfleet.train.ddp.step import TrainStep, capture_stream, make_capturable, on_stream
from rayfleet.train.metrics import format_epoch
from rayfleet.train.models.resnet import resnet18_grayscale
from rayfleet.train.models.small_convs import GPU_MAX_PIXELS, MAX_PIXELS, gemm_small_convs
from rayfleet.train.parallel import broadcast_buffers, parallelize
from rayfleet.train.ray_connect import quiet_report_logs

DEFAULT_CONFIG = Path("rayfleet/train/configs/ddp.yaml")  # wherever the package is installed (config.packaged)


def _load_splits(cfg: DDPConfig, rt: Runtime, local_rank: int) -> tuple[DeviceSplit, DeviceSplit]:
    if cfg.download and local_rank != 0:
        dist.barrier()  # one download per node, by local rank 0
    root = fashion_mnist.job_root(cfg.data_dir, cfg.s3_endpoint_url)  # s3://: one copy per node, then local
    train = fashion_mnist.load(root, train=True, download=cfg.download).head(cfg.train_subset)
    test = fashion_mnist.load(root, train=False, download=cfg.download).head(cfg.test_subset)
    if cfg.download and local_rank == 0:
        dist.barrier()
    return DeviceSplit(train, rt.device, rt.channels_last), DeviceSplit(test, rt.device, rt.channels_last)


def build_model(cfg: DDPConfig, rt: Runtime) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = resnet18_grayscale().to(rt.device)
    if rt.small_convs_as_gemm:
        gemm_small_convs(model, MAX_PIXELS if rt.device.type == "cpu" else GPU_MAX_PIXELS)
    if rt.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # fused: one kernel for all parameters instead of several per tensor (CPU and CUDA alike).
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    make_capturable(optimizer, rt.device)
    return model, optimizer


def make_step(model, optimizer, cfg: DDPConfig, rt: Runtime, stream=None) -> TrainStep:
    """The job's step over `model` (the DDP wrapper): a whole-step CUDA graph when `rt.cuda_graph`, built
    on `stream`, the stream the wrapper was built on (train_step.capture_stream)."""
    return TrainStep(model, optimizer, rt.autocast, cfg.batch_size, compiled=cfg.compile, stream=stream)


def train_epoch(
    step_fn: TrainStep,
    data: DeviceSplit,
    cfg: DDPConfig,
    rt: Runtime,
    epoch: int,
    rank: int,
    world: int,
    on_step=None,
    position: EpochPosition | None = None,
    control: RunControl | None = None,
    phases: Phases | None = None,
):
    """One epoch of `step_fn` (make_step), or its rest after `position` (a run preempted mid-epoch);
    `on_step(step_in_epoch, loss)` after each step when given (rank 0's tracking). Returns (loss sum,
    samples, the step at which a preemption notice, asked through `control`, ended it early or None). With
    `phases`, the time spent waiting for each next batch is its `data` (the loader's wait)."""
    step_fn.model.train()
    loss_sum = torch.zeros((), device=rt.device)
    seen = 0
    skip = position.samples if position else 0
    first = skip // (cfg.batch_size * world)  # steps of this world that the skipped samples make
    indices = data.shard_indices(epoch, rank, world, cfg.seed, shuffle=True, skip=skip)
    watch = control.steps if control is not None else None
    batches = data.batches(indices, cfg.batch_size, augment=cfg.augment)
    for step, (x, y) in enumerate(loader_waits(batches, phases), start=first + 1):
        if watch is not None:
            watch.enter()
        loss = step_fn(x, y)
        if watch is not None:
            watch.leave()
        loss_sum += loss * y.numel()  # stays on the device: no sync per step
        seen += y.numel()
        if on_step is not None:
            on_step(step, loss)
        if control is not None and control.noticed(step):  # every rank, the same steps
            return loss_sum, seen, step
    return loss_sum, seen, None


@torch.no_grad()
def evaluate(model, data: DeviceSplit, cfg: DDPConfig, rt: Runtime, rank: int, world: int):
    model.eval()
    loss_sum = torch.zeros((), device=rt.device)
    correct = torch.zeros((), device=rt.device, dtype=torch.long)
    indices = data.shard_indices(0, rank, world, cfg.seed, shuffle=False)
    for x, y in data.batches(indices, cfg.eval_batch_size):
        with rt.autocast():
            logits = model(x)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum")
        correct += (logits.argmax(1) == y).sum()
    return loss_sum, correct, indices.numel()


def train_loop(loop_config: dict) -> None:
    """Runs on every Ray Train worker. Never branches on the platform: the Runtime carries the device.

    A failure of torch.compile or of the step's CUDA graph capture is the same on every try: it is recorded
    in the run directory, and the next attempt (a Ray Train retry, or the same run name again) trains without
    that feature instead of repeating it (compile_guard.py)."""
    cfg: DDPConfig = loop_config["config"]
    run_dir = RunDir(cfg.storage, loop_config["run_name"], cfg.s3_endpoint_url)
    rank = ray.train.get_context().get_world_rank()
    cfg = compile_guard.without_failed(cfg, run_dir, rank)
    try:
        _train(loop_config, cfg, run_dir)
    except Exception as exc:
        compile_guard.record_failure(cfg, run_dir, exc, rank)
        raise


def _build(cfg: DDPConfig, rt: Runtime, run_name: str, rank: int):
    """Model, optimizer, what a checkpoint restored, the DDP wrapper and the step over it."""
    model, optimizer = build_model(cfg, rt)
    found = resume(model, optimizer, run_name, rank)
    make_capturable(optimizer, rt.device)  # also for a checkpoint written on a CPU
    stream = capture_stream(rt.device, rt.cuda_graph)
    with on_stream(stream):  # DDP is built on the stream its step is captured on
        ddp_model = parallelize(
            model,
            rt.device,
            "ddp",
            compile_mode=cfg.compile_mode if cfg.compile else None,
            grad_compression=cfg.grad_compression,
            bucket_cap_mb=cfg.bucket_cap_mb,
        )
    return model, optimizer, found, ddp_model, make_step(ddp_model, optimizer, cfg, rt, stream)


def _train(loop_config: dict, cfg: DDPConfig, run_dir: RunDir) -> None:
    run_name: str = loop_config["run_name"]
    quiet_report_logs()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    rt = Runtime.resolve(cfg, ray.train.torch.get_device())
    phases = Phases()  # this loop's part of the run's goodput ledger (rayfleet/core/ledger.py), sent by rank 0
    with phases.timed("data"):
        train_data, test_data = _load_splits(cfg, rt, ctx.get_local_rank())
    with phases.timed("model_load"):
        model, optimizer, found, ddp_model, step_fn = _build(cfg, rt, run_name, rank)
    setup = time.perf_counter()  # to the first epoch: the run's tracking and controls, its start

    n, steps = len(train_data), steps_per_epoch(len(train_data), world, cfg.batch_size)
    carried = {"preemptions": found.preemptions, "steps_redone": found.steps_redone}
    log = tracking = None
    redone = 0
    if rank == 0:
        redone = redone_steps(run_dir, found, n, cfg.batch_size * world)
        carried["steps_redone"] += redone
        log, tracking = rank0_tracking(loop_config, run_dir, found, n, steps, world, model)
    if rank == 0 and found.attempt == 0:
        data = announce(cfg, rt, world, n, len(test_data), steps)
        run_dir.send("data", data=data)  # the record says what it trained on: the real set, or SYNTHETIC
    # Every epoch checkpointed; a stop request asked for after the epoch's checkpoint, on every rank.
    preemption = Preemption(cfg.preemption_check_steps)
    watch = hang_watch.Steps.start(run_name, rank)
    control = RunControl(run_dir, rank, rt.device, preemption, last=cfg.epochs, stop_after_save=True, steps=watch)

    pause_s = None  # how long the last epoch's checkpoint held the loop: into the next epoch's row
    uploads = checkpoint.Uploads()
    phases.add("run_start", time.perf_counter() - setup)
    for epoch in range(found.start_epoch, cfg.epochs + 1):
        torch.manual_seed(cfg.seed * 1_000_003 + epoch * 1_009 + rank)  # augmentation: reproducible on resume
        position = found.position if epoch == found.start_epoch else None
        rt.sync()
        t0 = time.perf_counter()
        if tracking is not None:
            tracking.epoch = epoch
        waited = phases.seconds.get("data", 0.0)
        train_loss, seen, preempted_at = train_epoch(
            step_fn, train_data, cfg, rt, epoch, rank, world, tracking, position, control, phases
        )
        if preempted_at is not None:
            mid = position_at(epoch, position, train_loss, seen, world, rt.device)
            save = partial(save_at_preemption, model, optimizer, cfg, found, carried, mid, rank, preempted_at)
            control.save_at_notice(save, f"epoch {epoch} step {preempted_at}", (epoch - 1) * n + mid.samples)
        rt.sync()
        train_s = time.perf_counter() - t0
        account_steps(phases, train_s - (phases.seconds.get("data", 0.0) - waited), redone, seen, cfg.batch_size)
        redone = 0
        with phases.timed("evaluation"):
            broadcast_buffers(model)  # evaluate (and checkpoint) exactly rank 0's model on every rank
            test_loss, correct, tested = evaluate(ddp_model.module, test_data, cfg, rt, rank, world)
            *sums, train_s_sum = all_sum(train_loss, seen, test_loss, correct, tested, train_s, device=rt.device)
        row = epoch_row(epoch, sums, position, train_s, time.perf_counter() - t0, world, rt, found, carried)
        if pause_s is not None:
            row["checkpoint_pause_s"] = pause_s
            phases.add("checkpoint", pause_s)
        # The preemption ask about once a second from now on: the same figures, so the same steps, on every rank.
        steps_done = sums[1] / (world * cfg.batch_size)
        preemption.every_steps = steps_between_checks(cfg.preemption_check_steps, steps_done, train_s_sum / world)
        if log is not None:
            log.append(row)
            print(format_epoch(row, cfg.epochs), flush=True)
            tracking.scalars.log(epoch * steps, epoch_scalars(row, cfg, rt))
            tracking.scalars.flush()
        save = partial(save_epoch, model, optimizer, cfg, found, carried, row, rank, uploads)
        started = time.perf_counter()
        if log is not None:
            run_dir.send(EVENT, **{f"{EVENT}/{found.attempt}": phases.event()})
        stopped = control.at_boundary(epoch, save, f"after epoch {epoch}").stop_reason
        pause_s = time.perf_counter() - started
        if stopped:
            break
    phases.add("checkpoint", pause_s or 0.0)  # the last epoch's, which no later row carries
    if log is not None:
        run_dir.send(EVENT, **{f"{EVENT}/{found.attempt}": phases.event()})
    watch.close()
    if tracking is not None:
        tracking.scalars.close()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m rayfleet.train.ddp",
        description="ResNet-18 on FashionMNIST, data-parallel with Ray Train.",
        epilog="Overrides: key=value for any key of the config, e.g. epochs=3 storage=s3://bucket/runs",
    )
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="YAML config (default: %(default)s)")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    return parser.parse_intermixed_args(argv)  # --config and key=value in any order


def main(argv: list[str] | None = None) -> int:
    from rayfleet.train.fit import fit_and_summarize

    args = _parse_args(argv)
    try:
        cfg = load_config(DDPConfig, args.config, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_name = cfg.run_name or f"ddp-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    return fit_and_summarize(train_loop, cfg, run_name)
