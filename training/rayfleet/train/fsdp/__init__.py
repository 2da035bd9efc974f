"""FSDP: fine-tune a causal LM (dolly-v2-7b by default) on packed text with FSDP2 on Ray Train.

Local, offline, on CPU (a tiny GPT-NeoX and a generated corpus: `make text-data` first):
    python -m rayfleet.train.fsdp --config rayfleet/train/configs/fsdp-tiny.yaml
    make train-fsdp ON=local ARGS="max_steps=20"
On a running Ray cluster with GPUs:
    RAY_ADDRESS=... python -m rayfleet.train.fsdp model=databricks/dolly-v2-7b data=s3://bucket/tiny_shakespeare.txt
On ECS (the trainer task runs this module inside the VPC):
    rayfleet launch JOB=fsdp ARGS="max_steps=500"
Re-running with the same run_name resumes at the step after its latest checkpoint; stop_at_step ends an
invocation early (checkpointed), for time-boxed or preemptible runs.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import torch

from rayfleet.core.config import ConfigError, load_config
from rayfleet.core.errors import EXIT_BAD_INPUT
from rayfleet.core.ledger import EVENT, Phases
from rayfleet.core.run_dir import RunDir
from rayfleet.train.checkpoint.hf_export import write_and_verify
from rayfleet.train.control.preemption import Preemption, record_reached, redone_since
from rayfleet.train.control.run_control import RunControl
from rayfleet.train.data import synthetic_text, text
from rayfleet.train.data.text import PackedBlocks, pack, read_text, tokenize
from rayfleet.train.fsdp.config import FSDPConfig
from rayfleet.train.fsdp.metrics import fsdp_summary, progress_line, step_metrics, step_scalars, window
from rayfleet.train.fsdp.setup import announce, model_info, prime_checkpoints
from rayfleet.train.fsdp.worker import Worker
from rayfleet.train.metrics import MetricsLog
from rayfleet.train.models.hf import ModelNotFound, local_model_dir, resolve_model_dir
from rayfleet.train.ray_connect import quiet_report_logs
from rayfleet.train.tracking.progress import Progress
from rayfleet.train.tracking.scalars import Scalars

DEFAULT_CONFIG = Path("rayfleet/train/configs/fsdp.yaml")  # wherever the package is installed (config.packaged)


def lr_at(cfg: FSDPConfig, step: int) -> float:
    """Linear warmup, then cosine down to min_lr_ratio x lr at max_steps. A pure function of the step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0))))


def make_strategy(cfg: FSDPConfig, model_dir: Path, device: torch.device, rank: int):
    if cfg.strategy == "deepspeed":
        from rayfleet.train.fsdp.deepspeed import DeepSpeedStrategy

        return DeepSpeedStrategy(cfg, model_dir, device, rank)
    from rayfleet.train.fsdp.strategy import FSDPStrategy

    return FSDPStrategy(cfg, model_dir, device, rank)


def train_loop(loop_config: dict) -> None:
    """Ray Train's training function, on every worker: the loop, on this worker."""
    quiet_report_logs()
    run_loop(loop_config, Worker.of_ray_train())


def run_loop(loop_config: dict, worker: Worker) -> None:
    """The FSDP loop on one rank: resume from the latest checkpoint, train to `last`, checkpoint at the cadence,
    at a stop request and at a preemption notice (then wait for the restart), export at the end."""
    cfg: FSDPConfig = loop_config["config"]
    run_name = loop_config["run_name"]
    phases = Phases()  # this loop's part of the run's goodput ledger (rayfleet/core/ledger.py), sent by rank 0
    began = time.perf_counter()
    try:  # on this rank's node: the driver may hold no weights (the trainer image), the worker's image does
        model_dir = resolve_model_dir(loop_config["model_dir"])
        check_seq_len(loop_config["config"], model_dir)  # the driver could not, without the model
    except (ModelNotFound, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise
    rank, world, device = worker.rank, worker.world, worker.device
    torch.manual_seed(cfg.seed)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    phases.add("model_load", time.perf_counter() - began)
    with phases.timed("data"):
        corpus = read_text(cfg.data, cfg.s3_endpoint_url)
        data = PackedBlocks(pack(tokenize(corpus, tokenizer), cfg.seq_len))
    with phases.timed("model_load"):  # the weights, sharded, and the checkpoint it resumes from
        strategy = make_strategy(cfg, model_dir, device, rank)
        state = strategy.load()
    setup = time.perf_counter()  # to the first step: the run's tracking and controls, its start
    start, attempt = (state["step"], state["attempt"] + 1) if state else (0, 0)
    run_dir = RunDir(cfg.storage, run_name, cfg.s3_endpoint_url)
    carried = {key: (state or {}).get(key, 0) for key in ("preemptions", "steps_redone")}
    resumed_from = (state or {}).get("resumed_from")  # the newest complete checkpoint's name (checkpoint.latest)
    redone = 0  # this attempt's first steps that repeat what the last one took past its checkpoint
    if rank == 0 and state:
        redone = redone_since(run_dir, start)
        carried["steps_redone"] += redone
        run_dir.send("resumed", resumed_from={"attempt": attempt, "checkpoint": resumed_from})  # run.json's
    train_state = {"attempt": attempt, "seed": cfg.seed, "strategy": cfg.strategy}
    log = MetricsLog(run_dir, start + 1, key="step") if rank == 0 else None
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    info = model_info(cfg, strategy, device, device_name, world)  # a collective: every rank's shard size
    if rank == 0:
        what = f"resuming at step {start + 1} (attempt {attempt})" if state else "starting"
        trained_on = synthetic_text.describe(corpus, cfg.data)
        announce(cfg, run_name, what, trained_on, data, world, device_name)
        if not state:
            run_dir.send("data", data=trained_on)  # the record says what it trained on: the real text, or SYNTHETIC

    last = min(cfg.max_steps, cfg.stop_at_step or cfg.max_steps)
    window_start, loss_sum, tokens = time.perf_counter(), 0.0, 0
    scalars = Scalars(run_dir, loop_config["tracking"], purge_step=start + 1) if rank == 0 else None
    progress = Progress(cfg.max_steps, start, cfg.progress_every_s)
    # A stop request asked for at each logged step, before its checkpoint: a stop saves the step, due or not.
    watch = worker.watch(run_name, rank)
    preemption = Preemption(cfg.preemption_check_steps, ask=worker.preemption_info, sleep=worker.sleep)
    control = RunControl(run_dir, rank, device, preemption, cfg.checkpoint_every, last, steps=watch)
    sent_as = f"{EVENT}/{attempt}"  # the record's field of this attempt's phases
    phases.add("run_start", time.perf_counter() - setup)
    for step in range(start, last):
        stepped = time.perf_counter()
        watch.enter()
        loss_sum, tokens, grad_norm = _train_step(strategy, data, cfg, step, rank, world, device, loss_sum, tokens)
        watch.leave()
        phases.add("redone" if step < start + redone else "compute", time.perf_counter() - stepped)
        if step == start:  # the optimizer has its state now: the checkpoints' staging memory is made once, here
            prime_checkpoints(strategy, rank)
        info["steps"] += 1
        done = step + 1
        # Asked first: a step that is checkpointed anyway at a notice is saved once, as the notice's (run_control.py).
        preempted = control.noticed(done)  # every rank, the same steps
        if done % cfg.log_every == 0 or control.checkpoint_due(done):
            if device.type == "cuda":
                with phases.timed("compute"):  # the kernels the steps queued
                    torch.cuda.synchronize(device)  # the window's time includes the kernels it queued
            metrics = step_metrics(
                cfg, info, loss_sum, tokens, time.perf_counter() - window_start, device, world, grad_norm
            )
            row = {"step": done, "lr": lr_at(cfg, step), "grad_norm": metrics.pop("grad_norm"), "attempt": attempt}
            row["resumed_from"] = resumed_from
            row |= {"param_bytes_per_rank": info["shard_bytes"], **carried, **metrics}
            # Everything from here to the next logged step (logging, checkpoints) counts in the next window.
            window_start, loss_sum, tokens, info["steps"] = time.perf_counter(), 0.0, 0, 0
            with phases.timed("checkpoint"):
                decision = _boundary(strategy, control, row, {**train_state, **carried}, last)
            if log is not None:
                _log_step(log, scalars, run_dir, row, cfg, device, decision.save)
                run_dir.send(EVENT, **{sent_as: phases.event()})
            if decision.stop_reason:  # a budget: every rank stops here
                last = done
                break
        elif rank == 0 and progress.due():
            print(progress.line(done, run_name, window(loss_sum, tokens, window_start, info["steps"], cfg)), flush=True)
            record_reached(run_dir, done)
        if preempted:  # the notice's checkpoint is synchronous: the worker only waits for the restart after it
            noticed = {**train_state, **carried, "preemptions": carried["preemptions"] + 1}
            save = partial(strategy.save, done, noticed, {"step": done, "preempted": True}, blocking=True)
            with phases.timed("checkpoint"):
                control.save_at_notice(save, f"step {done}", done)
    watch.close()
    with phases.timed("checkpoint"):  # the last checkpoint's write, then the model written out (the export)
        strategy.close()  # nothing left in flight; the staging memory goes before the export needs memory
        if cfg.export and last == cfg.max_steps:  # not a run stopped early
            _export(strategy, data, tokenizer, model_dir, run_dir, device, rank)
    if scalars is not None:
        scalars.close()
    if rank == 0:
        run_dir.send(EVENT, **{sent_as: phases.event()})


def _train_step(
    strategy, data: PackedBlocks, cfg: FSDPConfig, step: int, rank: int, world: int, device, loss_sum, tokens
):
    """One optimizer step over grad_accum micro-batches at the step's LR: (the window's loss sum and tokens on
    this rank, with this step's added, micro-batch by micro-batch; the gradient norm). The loss sum and the
    norm stay on the device: reading either would make the host wait for the device every step."""
    strategy.set_lr(lr_at(cfg, step))
    for micro in range(cfg.grad_accum):
        batch = data.micro_batch(step, micro, rank, world, cfg.seed, cfg.micro_batch_size, cfg.grad_accum)
        loss_sum += strategy.micro_step(_to_device(batch, device))
        tokens += batch.numel()
    return loss_sum, tokens, strategy.step()


def _to_device(batch: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A copy from pageable host memory waits until the device has run everything queued before it; from
    pinned memory it is queued like a kernel (the pinned buffer is kept until the copy is done)."""
    if device.type != "cuda":
        return batch.to(device)
    return batch.pin_memory().to(device, non_blocking=True)


def _boundary(strategy, control: RunControl, row: dict, train_state: dict, last: int):
    """A logged step's checkpoints, every rank: the one being written reported once every rank has written it;
    this step's saved when due or at a stop; waited for and reported when the loop ends here. Their metrics go
    into the step's row. Returns RunControl's decision."""
    done = row["step"]
    row |= strategy.finish_checkpoint(wait=False)
    decision = control.at_boundary(done, partial(_save, strategy, done, train_state, row), f"at step {done}")
    if decision.stop_reason or done == last:
        row |= strategy.finish_checkpoint()
    return decision


def _log_step(log: MetricsLog, scalars: Scalars, run_dir: RunDir, row: dict, cfg: FSDPConfig, device, saved) -> None:
    """Rank 0 at a logged step: the metrics row, a progress line, the scalars (flushed with a checkpoint), how far
    the run got."""
    log.append(row)
    print(progress_line(row, cfg.max_steps), flush=True)
    scalars.log(row["step"], step_scalars(row, device))
    if saved:
        scalars.flush()
    record_reached(run_dir, row["step"])


def _save(strategy, step: int, train_state: dict, row: dict) -> None:
    """A step's regular checkpoint (every rank). Into the step's row: checkpoint_pause_s, the seconds the save
    held up the loop (FSDP2's asynchronous save: while the shards are copied to CPU memory), and, when the one
    before was still being written, that one's wait (checkpoint_wait_s)."""
    metrics = {key: value for key, value in row.items() if not key.startswith("checkpoint_")}  # reported with it
    row |= strategy.finish_checkpoint()  # one at a time: the one before, if still being written
    started = time.perf_counter()
    strategy.save(step, train_state, metrics)
    row["checkpoint_pause_s"] = time.perf_counter() - started


def _export(strategy, data: PackedBlocks, tokenizer, model_dir: Path, run_dir: RunDir, device, rank: int) -> None:
    """The finished model in Hugging Face format, checked against the sharded one (a collective gather)."""
    probe = data.blocks[:1].to(device)
    full, logits = strategy.gather_for_export(probe)
    if rank == 0:
        result = write_and_verify(full, logits, probe, tokenizer, model_dir, run_dir, strategy.bf16)
        print(
            f"exported {result['export']} (max |logit diff| vs sharded: {result['export_max_logit_diff']:.2e})",
            flush=True,
        )


def check_seq_len(cfg: FSDPConfig, model_dir: Path) -> None:
    """ConfigError when seq_len is above the model's positions: on the driver when the model is there, else on
    the ranks once they have it."""
    from transformers import AutoConfig

    maximum = getattr(AutoConfig.from_pretrained(model_dir), "max_position_embeddings", None)
    if maximum is not None and cfg.seq_len > maximum:
        raise ConfigError(f"seq_len: {cfg.seq_len} is above the model's maximum of {maximum} positions")


def check_before_start(cfg: FSDPConfig) -> Path | None:
    """What can be checked on the driver, before any worker starts: the model and its length limit when the
    model is on this machine (else None: the ranks load it on their nodes), the data."""
    model_dir = local_model_dir(cfg.model)
    if model_dir is None and cfg.model.startswith(("/", ".", "~")):
        raise ConfigError(f"model: {cfg.model} is not a directory")
    if model_dir is None:
        print(f"model: {cfg.model} is not on the driver's machine: each rank loads it on its own node (the "
              "worker image's $MODEL_DIR, which make build preloads for the groups with models; else the Hub)",
              flush=True)  # fmt: skip
    else:
        check_seq_len(cfg, model_dir)
    if cfg.strategy == "deepspeed":
        try:
            import deepspeed  # noqa: F401 - only checking that it is installed
        except ImportError:
            raise ConfigError(
                "strategy: deepspeed is not installed here (pip install -r requirements/train.txt)"
            ) from None
    if not cfg.data.startswith(("s3://", "hf://")) and not Path(cfg.data).is_file():
        raise ConfigError(f"data: {cfg.data} does not exist (`make text-data` fetches tiny_shakespeare)")
    return model_dir


def with_data_resolved(cfg: FSDPConfig) -> FSDPConfig:
    """The config with the text its ranks read: the real file, or the generated corpus beside its name; said in
    the job's first line, SYNTHETIC when generated (the ranks say it again, and record it, once they read it)."""
    found = text.resolve(cfg.data, cfg.s3_endpoint_url)
    local = "://" not in found and Path(found).is_file()
    if (local and synthetic_text.file_is_generated(found)) or found.endswith(str(synthetic_text.GENERATED)):
        said = synthetic_text.describe(synthetic_text.LABEL, found)
    else:
        said = found
    missing = f"; {cfg.data} is not there (`make text-data` fetches tiny_shakespeare when online)"
    print(f"data: {said}{missing if found != cfg.data else ''}", flush=True)
    return cfg.model_copy(update={"data": found})


def main(argv: list[str] | None = None) -> int:
    from rayfleet.train.fit import fit_and_summarize

    parser = argparse.ArgumentParser(prog="python -m rayfleet.train.fsdp", description=__doc__.split("\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_intermixed_args(argv)
    try:
        cfg = with_data_resolved(load_config(FSDPConfig, args.config, args.overrides))
        model_dir = check_before_start(cfg)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    run_name = cfg.run_name or f"fsdp-{datetime.now(UTC):%Y%m%d-%H%M%S}"
    # a folder the user named goes as its full path (the ranks see it where they share this file system); an id
    # goes as itself, and each rank resolves it on its own node, not at this machine's copy
    named_a_folder = model_dir is not None and Path(cfg.model).expanduser().is_dir()
    model = str(model_dir.resolve()) if named_a_folder else cfg.model
    return fit_and_summarize(train_loop, cfg, run_name, {"model_dir": model}, fsdp_summary)
