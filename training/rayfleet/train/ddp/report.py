"""What the DDP job reports: its opening line, each epoch's row (loss, accuracy, throughput) and scalars, and
rank 0's tracking (TensorBoard, MLflow, progress)."""

from __future__ import annotations

import time

import torch

from rayfleet.core.run_dir import RunDir
from rayfleet.train.control.preemption import record_reached
from rayfleet.train.data import fashion_mnist
from rayfleet.train.ddp.config import DDPConfig, Runtime
from rayfleet.train.ddp.state import EpochPosition, Resume
from rayfleet.train.metrics import MetricsLog
from rayfleet.train.tracking.progress import Progress
from rayfleet.train.tracking.scalars import Scalars, memory_gb


class StepTracking:
    """Rank 0 during an epoch: the step loss and gradient norm to the scalars every `log_every_steps`, a
    progress line when due. Reads them (a device sync) only then: the steps in between cost a clock read.
    DDP has averaged the gradients over the ranks, so rank 0's norm is the whole batch's. With each progress
    line, `reached(epoch, step)` records how far the run got (rayfleet/train/control/preemption.py counts redone
    work)."""

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


def rank0_tracking(loop_config: dict, run_dir: RunDir, found: Resume, n: int, steps: int, world: int, model):
    """Rank 0's metrics log and step tracking (TensorBoard/MLflow scalars, progress lines, how far it got); the
    checkpoint this attempt resumed from goes into the run record first (`record_resume`)."""
    record_resume(run_dir, found)
    cfg: DDPConfig = loop_config["config"]
    per_step = cfg.batch_size * world
    log = MetricsLog(run_dir, found.start_epoch)
    first = (found.start_epoch - 1) * steps  # the checkpoint's step: TensorBoard drops what an earlier attempt
    scalars = Scalars(run_dir, loop_config["tracking"], purge_step=first + 1)  # logged after it
    reached = lambda epoch, step: record_reached(run_dir, (epoch - 1) * n + min(step * per_step, n))  # noqa: E731
    progress = Progress(cfg.epochs * steps, first, cfg.progress_every_s)
    return log, StepTracking(scalars, progress, cfg, steps, world, model, reached)


def record_resume(run_dir: RunDir, found: Resume) -> None:
    """run.json's `resumed_from`: the checkpoint this attempt of the job resumed from (the newest complete one
    kept, rayfleet/train/checkpoint/resume.py) with the job's attempt number, sent as an event (the driver
    owns run.json). None on a fresh start: nothing sent."""
    if found.resumed_from is not None:
        run_dir.send("resumed", resumed_from={"attempt": found.attempt, "checkpoint": found.resumed_from})


def announce(cfg: DDPConfig, rt: Runtime, world: int, n: int, tested: int, steps: int) -> str:
    """Rank 0's first line: devices, precision, the data and its size; returns what the data is."""
    precision = "bf16" if rt.amp_dtype else "fp32"
    step = ", the step as one CUDA graph" if rt.cuda_graph else ""
    data = fashion_mnist.describe(fashion_mnist.job_root(cfg.data_dir, cfg.s3_endpoint_url))
    print(
        f"training on {world} x {rt.device.type} ({precision}{step}): {n:,} train / {tested:,} test images of {data}, "
        f"{steps} steps/epoch of {cfg.batch_size}/worker",
        flush=True,
    )
    return data


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
        "resumed_from": found.resumed_from,  # the checkpoint this attempt started from (None: a fresh start)
        **carried,
    }


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
