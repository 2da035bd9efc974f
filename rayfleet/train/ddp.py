"""DDP: ResNet-18 on FashionMNIST with Ray Train, data-parallel over N workers.

Local, on a laptop (starts its own Ray cluster unless one runs; `make data` first for generated data):
    python -m rayfleet.train.ddp                                   # rayfleet/train/configs/ddp.yaml
    python -m rayfleet.train.ddp epochs=3 train_subset=12000       # any key=value overrides the YAML
    make train-ddp-local ARGS="epochs=3"
On a running Ray cluster (make cluster-up, or any cluster with token auth):
    RAY_ADDRESS=127.0.0.1:6390 python -m rayfleet.train.ddp storage=s3://my-bucket/runs
On ECS (the trainer task runs this module inside the VPC; see rayfleet/ecs/launch.py):
    make train-ddp BUCKET=my-bucket
Re-running with the same run_name resumes from that run's latest checkpoint.
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass
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
from rayfleet.core.run_dir import RunDir
from rayfleet.train import checkpoint
from rayfleet.train.data import fashion_mnist
from rayfleet.train.data.device_batches import DeviceSplit, steps_per_epoch
from rayfleet.train.ddp_config import DDPConfig
from rayfleet.train.metrics import MetricsLog, format_epoch
from rayfleet.train.models.resnet import resnet18_grayscale
from rayfleet.train.models.small_convs import gemm_small_convs
from rayfleet.train.parallel import broadcast_buffers, parallelize
from rayfleet.train.precision import wants_bf16
from rayfleet.train.preemption import Preemption, record_reached, redone_since
from rayfleet.train.ray_connect import quiet_report_logs
from rayfleet.train.run_control import RunControl
from rayfleet.train.tracking.progress import Progress
from rayfleet.train.tracking.scalars import Scalars, memory_gb

DEFAULT_CONFIG = Path(__file__).parent / "configs" / "ddp.yaml"


@dataclass(frozen=True)
class Runtime:
    """What the device makes of the config: bf16 where the device computes it natively; on GPU channels_last;
    on CPU the small convolutions as matrix products (oneDNN is slow on 1-4 pixel maps; cuDNN is not) and
    NCHW, which measured faster than channels_last around them (bench/vs_blueprint.py)."""

    device: torch.device
    amp_dtype: torch.dtype | None
    channels_last: bool
    small_convs_as_gemm: bool = False

    @classmethod
    def resolve(cls, cfg: DDPConfig, device: torch.device) -> Runtime:
        bf16 = wants_bf16(cfg.precision, device)
        gemm = cfg.small_convs_as_gemm is True or (cfg.small_convs_as_gemm == "auto" and device.type == "cpu")
        return cls(device, torch.bfloat16 if bf16 else None, cfg.channels_last and device.type == "cuda", gemm)

    def autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(self.device.type, dtype=self.amp_dtype)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


def _load_splits(cfg: DDPConfig, rt: Runtime, local_rank: int) -> tuple[DeviceSplit, DeviceSplit]:
    if cfg.download and local_rank != 0:
        dist.barrier()  # one download per node, by local rank 0
    train = fashion_mnist.load(cfg.data_dir, train=True, download=cfg.download).head(cfg.train_subset)
    test = fashion_mnist.load(cfg.data_dir, train=False, download=cfg.download).head(cfg.test_subset)
    if cfg.download and local_rank == 0:
        dist.barrier()
    return DeviceSplit(train, rt.device, rt.channels_last), DeviceSplit(test, rt.device, rt.channels_last)


def _all_sum(*values: torch.Tensor | float, device: torch.device) -> list[float]:
    packed = torch.stack([torch.as_tensor(v, dtype=torch.float64, device=device) for v in values])
    dist.all_reduce(packed)
    return packed.tolist()


def build_model(cfg: DDPConfig, rt: Runtime) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = resnet18_grayscale().to(rt.device)
    if rt.small_convs_as_gemm:
        gemm_small_convs(model)
    if rt.channels_last:
        model = model.to(memory_format=torch.channels_last)
    # fused: one kernel for all parameters instead of several per tensor (CPU and CUDA alike).
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
    return model, optimizer


def train_epoch(
    model,
    optimizer,
    data: DeviceSplit,
    cfg: DDPConfig,
    rt: Runtime,
    epoch: int,
    rank: int,
    world: int,
    on_step=None,
    position: EpochPosition | None = None,
    control: RunControl | None = None,
):
    """One epoch, or its rest after `position` (a run preempted mid-epoch); `on_step(step_in_epoch, loss)`
    after each step when given (rank 0's tracking). Returns (loss sum, samples, the step at which a
    preemption notice, asked through `control`, ended it early or None)."""
    model.train()
    loss_sum = torch.zeros((), device=rt.device)
    seen = 0
    skip = position.samples if position else 0
    first = skip // (cfg.batch_size * world)  # steps of this world that the skipped samples make
    indices = data.shard_indices(epoch, rank, world, cfg.seed, shuffle=True, skip=skip)
    for step, (x, y) in enumerate(data.batches(indices, cfg.batch_size, augment=cfg.augment), start=first + 1):
        with rt.autocast():
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach() * y.numel()  # stays on the device: no sync per step
        seen += y.numel()
        if on_step is not None:
            on_step(step, loss)
        if control is not None and control.noticed(step):  # every rank, the same steps
            return loss_sum, seen, step
    return loss_sum, seen, None


@dataclass(frozen=True)
class EpochPosition:
    """How far into an epoch a preemption checkpoint was taken: the samples used (all ranks together: the
    permutation's prefix, rayfleet/train/data/order.py), and the epoch's train loss so far."""

    epoch: int
    samples: int
    loss_sum: float = 0.0
    seen: int = 0


class StepTracking:
    """Rank 0 during an epoch: the step loss and gradient norm to the scalars every `log_every_steps`, a
    progress line when due. Reads them (a device sync) only then: the steps in between cost a clock read.
    DDP has averaged the gradients over the ranks, so rank 0's norm is the whole batch's. With each progress
    line, `reached(epoch, step)` records how far the run got (rayfleet/train/preemption.py counts redone work)."""

    def __init__(
        self, scalars: Scalars, progress: Progress, cfg: DDPConfig, steps: int, world: int, model, reached=None
    ):
        self.scalars, self.progress, self.cfg, self.steps, self.world = scalars, progress, cfg, steps, world
        self.grads = [p for p in model.parameters() if p.requires_grad]
        self.reached = reached
        self.epoch, self.window = 1, (time.perf_counter(), progress.start)

    def grad_norm(self) -> float:
        return torch.nn.utils.get_total_norm([p.grad for p in self.grads if p.grad is not None]).item()

    def __call__(self, step: int, loss: torch.Tensor) -> None:
        done = (self.epoch - 1) * self.steps + step
        if done % self.cfg.log_every_steps == 0:
            self.scalars.log(done, {"train/step_loss": loss.item(), "train/grad_norm": self.grad_norm()})
        if self.progress.due():
            now = time.perf_counter()
            rate = (done - self.window[1]) * self.cfg.batch_size * self.world / (now - self.window[0])
            self.window = (now, done)
            values = {"loss": f"{loss.item():.4f}", "img/s": f"{rate:,.0f}"}
            print(self.progress.line(done, f"epoch {self.epoch}/{self.cfg.epochs}", values), flush=True)
            if self.reached is not None:
                self.reached(self.epoch, step)


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


@dataclass(frozen=True)
class Resume:
    """Where a (re)started attempt begins, from the latest checkpoint; what the run carries across restarts."""

    start_epoch: int = 1
    attempt: int = 0
    position: EpochPosition | None = None  # set when the checkpoint was taken mid-epoch, at a preemption
    preemptions: int = 0
    steps_redone: int = 0


def resume(model, optimizer, run_name: str, rank: int) -> Resume:
    with checkpoint.latest() as directory:
        state = checkpoint.read_state(directory) if directory else None
    if state is None:
        return Resume()
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    checkpoint.set_rng_state(state["rng"])
    position = EpochPosition(**state["position"]) if state.get("position") else None
    found = Resume(
        state["epoch"] + 1, state["attempt"] + 1, position, state.get("preemptions", 0), state.get("steps_redone", 0)
    )
    if rank == 0:
        where = (
            f"epoch {state['epoch']}"
            if position is None
            else f"{position.samples:,} samples into epoch {position.epoch}"
        )
        print(f"resuming {run_name} from the checkpoint of {where} (attempt {found.attempt})", flush=True)
    return found


def redone_steps(run_dir: RunDir, found: Resume, n: int, per_step: int) -> int:
    """Steps the previous attempt took past the checkpoint this one resumes from (rank 0; see preemption.py)."""
    if found.attempt == 0:
        return 0
    resumed = (found.start_epoch - 1) * n + (found.position.samples if found.position else 0)
    return -(-redone_since(run_dir, resumed) // per_step)


def train_loop(loop_config: dict) -> None:
    """Runs on every Ray Train worker. Never branches on the platform: the Runtime carries the device."""
    cfg: DDPConfig = loop_config["config"]
    run_name: str = loop_config["run_name"]
    quiet_report_logs()
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    rt = Runtime.resolve(cfg, ray.train.torch.get_device())
    train_data, test_data = _load_splits(cfg, rt, ctx.get_local_rank())

    model, optimizer = build_model(cfg, rt)
    found = resume(model, optimizer, run_name, rank)
    ddp_model = parallelize(
        model,
        rt.device,
        "ddp",
        compile_mode=cfg.compile_mode if cfg.compile else None,
        grad_compression=cfg.grad_compression,
        bucket_cap_mb=cfg.bucket_cap_mb,
    )

    run_dir = RunDir(cfg.storage, run_name, cfg.s3_endpoint_url)
    n, steps = len(train_data), steps_per_epoch(len(train_data), world, cfg.batch_size)
    carried = {"preemptions": found.preemptions, "steps_redone": found.steps_redone}
    log = tracking = None
    if rank == 0:
        carried["steps_redone"] += redone_steps(run_dir, found, n, cfg.batch_size * world)
        log, tracking = rank0_tracking(loop_config, run_dir, found, n, steps, world, model)
    if rank == 0 and found.attempt == 0:
        announce(cfg, rt, world, n, len(test_data), steps)
    # Every epoch checkpointed; a stop request asked for after the epoch's checkpoint, on every rank.
    preemption = Preemption(cfg.preemption_check_steps)
    control = RunControl(run_dir, rank, rt.device, preemption, last=cfg.epochs, stop_after_save=True)

    for epoch in range(found.start_epoch, cfg.epochs + 1):
        torch.manual_seed(cfg.seed * 1_000_003 + epoch * 1_009 + rank)  # augmentation: reproducible on resume
        position = found.position if epoch == found.start_epoch else None
        rt.sync()
        t0 = time.perf_counter()
        if tracking is not None:
            tracking.epoch = epoch
        train_loss, seen, preempted_at = train_epoch(
            ddp_model, optimizer, train_data, cfg, rt, epoch, rank, world, tracking, position, control
        )
        if preempted_at is not None:
            mid = position_at(epoch, position, train_loss, seen, world, rt.device)
            save = partial(save_at_preemption, model, optimizer, cfg, found, carried, mid, rank, preempted_at)
            control.save_at_notice(save, f"epoch {epoch} step {preempted_at}", (epoch - 1) * n + mid.samples)
        rt.sync()
        train_s = time.perf_counter() - t0
        broadcast_buffers(model)  # evaluate (and checkpoint) exactly rank 0's model on every rank
        test_loss, correct, tested = evaluate(ddp_model.module, test_data, cfg, rt, rank, world)
        sums = _all_sum(train_loss, seen, test_loss, correct, tested, device=rt.device)
        row = epoch_row(epoch, sums, position, train_s, time.perf_counter() - t0, world, rt, found, carried)
        if log is not None:
            log.append(row)
            print(format_epoch(row, cfg.epochs), flush=True)
            tracking.scalars.log(epoch * steps, epoch_scalars(row, cfg, rt))
            tracking.scalars.flush()
        save = partial(save_epoch, model, optimizer, cfg, found, carried, row, rank)
        if control.at_boundary(epoch, save, f"after epoch {epoch}").stop_reason:
            break
    if tracking is not None:
        tracking.scalars.close()


def rank0_tracking(loop_config: dict, run_dir: RunDir, found: Resume, n: int, steps: int, world: int, model):
    """Rank 0's metrics log and step tracking (TensorBoard/MLflow scalars, progress lines, how far it got)."""
    cfg: DDPConfig = loop_config["config"]
    per_step = cfg.batch_size * world
    log = MetricsLog(run_dir, found.start_epoch)
    first = (found.start_epoch - 1) * steps  # the checkpoint's step: TensorBoard drops what an earlier attempt
    scalars = Scalars(run_dir, loop_config["tracking"], purge_step=first + 1)  # logged after it
    reached = lambda epoch, step: record_reached(run_dir, (epoch - 1) * n + min(step * per_step, n))  # noqa: E731
    progress = Progress(cfg.epochs * steps, first, cfg.progress_every_s)
    return log, StepTracking(scalars, progress, cfg, steps, world, model, reached)


def announce(cfg: DDPConfig, rt: Runtime, world: int, n: int, tested: int, steps: int) -> None:
    precision = "bf16" if rt.amp_dtype else "fp32"
    print(
        f"training on {world} x {rt.device.type} ({precision}): {n:,} train / "
        f"{tested:,} test images of {fashion_mnist.describe(cfg.data_dir)}, "
        f"{steps} steps/epoch of {cfg.batch_size}/worker",
        flush=True,
    )


def epoch_row(
    epoch: int,
    sums: list[float],
    position: EpochPosition | None,
    train_s: float,
    epoch_s: float,
    world: int,
    rt: Runtime,
    found: Resume,
    carried: dict,
) -> dict:
    """An epoch's metrics row from the sums over all ranks (train loss, samples, test loss, correct, tested),
    the train loss counting the part of the epoch before a mid-epoch resume."""
    g_train_loss, g_seen, g_test_loss, g_correct, g_tested = sums
    return {
        "epoch": epoch,
        "train_loss": (g_train_loss + (position.loss_sum if position else 0.0))
        / (g_seen + (position.seen if position else 0)),
        "test_loss": g_test_loss / g_tested,
        "test_accuracy": g_correct / g_tested,
        "test_images": int(g_tested),
        "images_per_s": g_seen / train_s,
        "images_per_s_per_worker": g_seen / train_s / world,
        "train_s": train_s,
        "epoch_s": epoch_s,
        "workers": world,
        "device": rt.device.type,
        "attempt": found.attempt,
        **carried,
    }


def save_epoch(model, optimizer, cfg: DDPConfig, found: Resume, carried: dict, row: dict, rank: int) -> None:
    """An epoch's checkpoint with its metrics row; every rank calls it, rank 0 uploads the whole model."""
    state = train_state(model, optimizer, cfg, found, carried, row["epoch"])
    write = (lambda directory: checkpoint.write_state(directory, state)) if rank == 0 else None
    checkpoint.report(row, checkpoint.checkpoint_name(row["epoch"]), write)


def train_state(model, optimizer, cfg: DDPConfig, found: Resume, carried: dict, epoch: int) -> dict:
    """What a checkpoint holds: `epoch` is the last complete one."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": epoch,
        "attempt": found.attempt,
        "seed": cfg.seed,
        "rng": checkpoint.rng_state(),
        **carried,
    }


def position_at(epoch: int, position: EpochPosition | None, loss_sum, seen: int, world: int, device) -> EpochPosition:
    """Where this epoch stands on every rank (a collective), counting the part before an earlier resume."""
    before = position or EpochPosition(epoch, 0)
    loss, samples = _all_sum(loss_sum, seen, device=device)
    return EpochPosition(epoch, before.samples + seen * world, before.loss_sum + loss, before.seen + int(samples))


def save_at_preemption(model, optimizer, cfg, found: Resume, carried: dict, mid: EpochPosition, rank: int, step: int):
    """The checkpoint a preemption notice asks for, mid-epoch, through the usual path; every rank calls it."""
    state = train_state(model, optimizer, cfg, found, carried, mid.epoch - 1)
    state.update(position=asdict(mid), preemptions=carried["preemptions"] + 1)
    write = (lambda directory: checkpoint.write_state(directory, state)) if rank == 0 else None
    name = f"{checkpoint.checkpoint_name(mid.epoch - 1)}_step_{step:06d}"  # sorts between its epochs' names
    checkpoint.report({"epoch": mid.epoch, "step": step, "preempted": True}, name, write)


def epoch_scalars(row: dict, cfg: DDPConfig, rt: Runtime) -> dict[str, float]:
    """An epoch's scalars for TensorBoard and MLflow, at the epoch's last step."""
    return {
        "train/loss": row["train_loss"],
        "test/loss": row["test_loss"],
        "test/accuracy": row["test_accuracy"],
        "throughput/images_per_s": row["images_per_s"],
        "lr": cfg.lr,
        "epoch": row["epoch"],
        "time/epoch_s": row["epoch_s"],
        "memory/peak_gb": memory_gb(rt.device),
    }


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
    from rayfleet.train.trainer import run_job

    args = _parse_args(argv)
    try:
        cfg = load_config(DDPConfig, args.config, args.overrides)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_name = cfg.run_name or f"ddp-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    # The imported module's function, not __main__'s: pickled by reference, so workers import it.
    from rayfleet.train.ddp import train_loop as loop

    return run_job(loop, cfg, run_name)


if __name__ == "__main__":
    sys.exit(main())
