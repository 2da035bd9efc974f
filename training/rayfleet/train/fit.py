"""The driver side of a job: connect to Ray, check the cluster can place it, run the TorchTrainer, summarize.

Shared by the jobs: a job hands over its `train_loop` and a validated config with the common keys
(num_workers, cpus_per_worker, device, storage, s3_endpoint_url, max_failures, keep_checkpoints).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import ray.train
from botocore.exceptions import BotoCoreError, ClientError
from ray.train import CheckpointConfig, FailureConfig, LoggingConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from rayfleet.core import ledger, stop_request, worker_groups
from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, ConfigError, RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.train import current_run
from rayfleet.train.control import hang_watch, nccl_transport
from rayfleet.train.job_config import JobConfig
from rayfleet.train.metrics import METRICS_FILE, read_rows
from rayfleet.train.ray_connect import cluster_gpus, placeable_workers, ray_session
from rayfleet.train.tracking import curves, mlflow_run
from rayfleet.train.tracking.scalars import Target


def _where() -> tuple[str | None, str]:
    """The run's worker group (a recipe's resources.group), and how a message names where it runs."""
    group = worker_groups.from_env(os.environ)
    return group, f"worker group {group}" if group else "this cluster"


def resolve_use_gpu(cfg: JobConfig) -> bool:
    """device=auto means GPU when the cluster (the run's worker group, if it names one) has one per worker;
    device=cuda demands it."""
    group, where = _where()
    gpus = cluster_gpus(group)
    if cfg.device == "cpu":
        return False
    if gpus >= cfg.fewest_workers:
        return True
    if cfg.device == "cuda":
        raise ConfigError(f"device: cuda needs {cfg.fewest_workers} GPUs (num_workers) but {where} has {gpus}")
    return False


def check_placement(cfg: JobConfig, use_gpu: bool) -> None:
    """Refused when the cluster (the run's group) could never place the run's workers (elastic: its minimum)."""
    group, where = _where()
    fits = placeable_workers(cfg.cpus_per_worker, 1 if use_gpu else 0, group)
    if cfg.fewest_workers > fits:
        what = f"{cfg.cpus_per_worker:g} CPU" + (" + 1 GPU" if use_gpu else "")
        raise ConfigError(
            f"num_workers: {cfg.num_workers} workers of {what} each do not fit {where}, which can place "
            f"{fits}; lower num_workers or cpus_per_worker, or add workers "
            f"(rayfleet cluster up --workers {cfg.num_workers})"
        )


def workers_of(cfg: JobConfig) -> str:
    return f"{cfg.fewest_workers}-{cfg.num_workers} (elastic)" if cfg.elastic else str(cfg.num_workers)


def write_config(run_dir: RunDir, cfg: JobConfig) -> None:
    """The resolved config goes into the run directory first: it also proves the storage is writable."""
    try:
        run_dir.write("config.yaml", cfg.to_yaml())
    except (OSError, RayfleetError, BotoCoreError, ClientError) as exc:
        raise ConfigError(f"storage: cannot write to {run_dir.url}: {exc}") from None


def marked_loop(train_loop: Callable, config: dict):
    """Each Ray Train worker marks its node with the run while it trains: the GPU-metrics sidecar beside it
    reads the mark for its per-run rollup (rayfleet/train/current_run.py). On GPUs across nodes it first checks
    the network NCCL chose (`network_check`)."""
    with current_run.marked(config["run_name"]):
        if config.get("use_gpu"):
            network_check(config["config"], config["run_name"])
        return train_loop(config)


def network_check(cfg: JobConfig, run_name: str) -> None:
    """A multi-node GPU run: the transport NCCL chose, into the run's record (rank 0), and on a worker group with
    EFA a stop at once when it is not EFA (train/control/nccl_transport.py). One node needs no network."""
    context = ray.train.get_context()
    if context.get_world_size() == context.get_local_world_size():
        return
    transport = nccl_transport.confirm(cfg.nccl_over_tcp)
    if context.get_world_rank() == 0 and transport:
        RunDir(cfg.storage, run_name, cfg.s3_endpoint_url).send("nccl", nccl_transport=transport)


def build_trainer(
    train_loop: Callable, cfg: JobConfig, run_name: str, use_gpu: bool, extra_loop_config: dict | None = None
) -> TorchTrainer:
    storage_path, storage_filesystem = RunDir(cfg.storage, run_name, cfg.s3_endpoint_url).ray_storage()
    resources = {"CPU": cfg.cpus_per_worker, **({"GPU": 1} if use_gpu else {})}
    return TorchTrainer(
        functools.partial(marked_loop, train_loop),
        train_loop_config={"config": cfg, "run_name": run_name, "use_gpu": use_gpu, **(extra_loop_config or {})},
        scaling_config=ScalingConfig(
            num_workers=(cfg.fewest_workers, cfg.num_workers) if cfg.elastic else cfg.num_workers,
            use_gpu=use_gpu,
            resources_per_worker=resources,
            elastic_resize_monitor_interval_s=cfg.elastic_resize_s,
            # a recipe's worker group: Ray places the workers on that group's nodes only (core/worker_groups.py)
            label_selector=worker_groups.selector(worker_groups.from_env(os.environ)),
        ),
        run_config=RunConfig(
            name=run_name,
            storage_path=storage_path,
            storage_filesystem=storage_filesystem,
            failure_config=FailureConfig(max_failures=cfg.max_failures, max_preemption_failures=cfg.max_preemptions),
            checkpoint_config=CheckpointConfig(num_to_keep=cfg.keep_checkpoints),
            # Train V2 turns print() into a logger that echoes to stdout and stderr: every progress line
            # would arrive twice. The jobs print one line per epoch from rank 0 themselves.
            worker_runtime_env={"env_vars": worker_env_vars(run_name, use_gpu)},
            logging_config=LoggingConfig(log_level="WARNING"),  # no line per report per rank
        ),
    )


def worker_env_vars(run_name: str, use_gpu: bool) -> dict[str, str]:
    """The Ray Train workers' own variables: Train V2's print patch off (it echoes every print() to stdout and
    stderr: each progress line twice; the jobs print one line per epoch from rank 0), MLflow's settings, and on
    GPUs NCCL's logging of its network choice (`network_check`)."""
    env = {"RAY_TRAIN_ENABLE_PRINT_PATCH": "0", **mlflow_run.worker_settings()}
    return {**env, **(nccl_transport.worker_env(run_name, os.environ) if use_gpu else {})}


@contextlib.contextmanager
def watched(cfg: JobConfig, run_name: str, run_dir: RunDir, use_gpu: bool):
    """The hang watchdog around fit() (hang_watch.py; hang_floor_s=0: none), and on GPUs Ray Train's NCCL hang
    detector too, failing the attempt (Ray reads its switches from the driver's environment when the trainer
    is built, so they are set for the block only)."""
    if cfg.hang_floor_s <= 0:
        yield
        return
    switches = {"RAY_TRAIN_ENABLE_NCCL_HANG_DETECTOR": "1", "RAY_TRAIN_NCCL_RAS_ACTION": "fail"} if use_gpu else {}
    before = {key: os.environ.get(key) for key in switches}
    os.environ.update(switches)
    try:
        with hang_watch.watching(run_name, run_dir, cfg.hang_factor, cfg.hang_floor_s, cfg.max_heals):
            yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def fit_and_summarize(
    train_loop: Callable,
    cfg: JobConfig,
    run_name: str,
    extra_loop_config: dict | None = None,
    summary_lines: Callable[[dict], list[str]] | None = None,
) -> int:
    """Run to the end; return the exit code (0 success, 1 failure, 2 bad config). Errors go to stderr."""
    run_dir = RunDir(cfg.storage, run_name, cfg.s3_endpoint_url)
    started, began_at = time.perf_counter(), time.time()
    try:
        with ray_session():
            use_gpu = resolve_use_gpu(cfg)
            check_placement(cfg, use_gpu)
            write_config(run_dir, cfg)
            target = open_tracking(run_dir, cfg)
            print(
                f"run {run_name}: {workers_of(cfg)} workers ({'GPU' if use_gpu else 'CPU'}), results in {run_dir.url}",
                flush=True,
            )
            loop_config = {"tracking": target, **(extra_loop_config or {})}
            try:
                with watched(cfg, run_name, run_dir, use_gpu):
                    result = build_trainer(train_loop, cfg, run_name, use_gpu, loop_config).fit()
            except BaseException:
                close_tracking(run_dir, target, None)
                raise
            close_tracking(run_dir, target, result)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RayfleetError as exc:
        print("\n".join(close_ledger(run_dir, began_at, started_only=True)), file=sys.stderr)
        print(f"error: {exc}", file=sys.stderr)  # last: the one line that says what went wrong
        return EXIT_FAILED
    except Exception as exc:  # Ray's TrainingFailedError and friends: say it in one place, keep the cause
        print("\n".join(close_ledger(run_dir, began_at, started_only=True)), file=sys.stderr)
        print(f"error: run {run_name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        print(f"checkpoints so far are in {run_dir.url}; re-run with run_name={run_name} to resume", file=sys.stderr)
        return EXIT_FAILED
    rows = read_rows(run_dir)
    lines = (summary_lines or ddp_summary)(rows[-1] if rows else {})
    ledger_lines = close_ledger(run_dir, began_at)
    print(summary(run_dir, result, time.perf_counter() - started, lines, ledger_lines), flush=True)
    reason = stop_request.requested(run_dir)
    if reason:
        print(f"run {run_name} stopped early: {reason}; re-run with run_name={run_name} to continue", flush=True)
    return 0


def close_ledger(run_dir: RunDir, began_at: float, started_only: bool = False) -> list[str]:
    """The run's goodput ledger (rayfleet/core/ledger.py), from this driver's start to now and what rank 0 sent,
    into the run's record, and its lines for the closing summary; also for a run that failed, once its loop
    had started (`started_only`): one that never started (no cluster, a refused config) leaves no run behind."""
    try:
        if started_only and not run_dir.entries():
            return []
        record = run_dir.record()
        if started_only and not ledger.sent_events(record):
            return []
        usd_per_hour = float((record.get("held") or {}).get("usd_per_hour") or 0.0)
        built = ledger.build(began_at, time.time(), ledger.sent_events(record), usd_per_hour)
        run_dir.send(ledger.LEDGER, **{ledger.LEDGER: built})
        return ledger.lines(built)
    except Exception as exc:  # a ledger must never fail a run
        return [f"ledger: not written ({type(exc).__name__}: {exc})"]


def open_tracking(run_dir: RunDir, cfg: JobConfig) -> Target:
    try:
        return Target.open(run_dir, cfg.tensorboard, cfg.mlflow_tracking_uri, cfg.mlflow_experiment, cfg.model_dump())
    except Exception as exc:  # MLflow's errors (unreachable server, bad URI): before any GPU time is spent
        raise ConfigError(f"mlflow_tracking_uri: cannot open an MLflow run: {exc}") from None


def close_tracking(run_dir: RunDir, target: Target, result) -> None:
    """After the run, also after a failure: the curves PNG; the MLflow run closed, with the model (the export,
    else the last checkpoint) as an artifact when it succeeded. Neither may turn a finished run into a failure."""
    try:
        rows = read_rows(run_dir)
        if rows:
            with tempfile.TemporaryDirectory() as scratch:
                run_dir.upload(curves.FILE, curves.draw({run_dir.run_name: rows}, Path(scratch) / curves.FILE))
    except Exception as exc:  # a plot must never fail a run
        print(f"warning: no {curves.FILE}: {exc}", file=sys.stderr)
    if target.mlflow_run_id is None:
        return
    try:
        with tempfile.TemporaryDirectory() as scratch:
            name = "export" if "export" in run_dir.entries() else None
            if name is None and result is not None and result.checkpoint is not None:
                name = Path(result.checkpoint.path).name
            model = run_dir.local_copy(name, Path(scratch)) if result is not None and name else None
            mlflow_run.close_run(target.mlflow_uri, target.mlflow_run_id, result is not None, model, name or "")
    except Exception as exc:
        print(f"warning: the MLflow run {target.mlflow_run_id} was not closed: {exc}", file=sys.stderr)


def ddp_summary(last: dict) -> list[str]:
    return [
        f"  epochs          {last.get('epoch', '?')}",
        f"  test accuracy   {last.get('test_accuracy', float('nan')):.4f}",
        f"  test loss       {last.get('test_loss', float('nan')):.4f}",
        f"  images/s        {last.get('images_per_s', float('nan')):,.0f} (last epoch)",
    ]


def summary(run_dir: RunDir, result, total_s: float, lines: list[str], ledger_lines: list[str] = ()) -> str:
    """The run's closing summary, ending with its goodput ledger."""
    checkpoint = result.checkpoint.path if result.checkpoint else None
    checkpoint_text = f"s3://{checkpoint}" if checkpoint and run_dir.is_s3 else checkpoint
    return "\n".join(
        [
            f"run {run_dir.run_name} finished in {total_s:.0f} s",
            *lines,
            f"  checkpoint      {checkpoint_text}",
            f"  metrics         {run_dir.display(METRICS_FILE)}",
            f"  curves          {run_dir.display(curves.FILE)}",
            f"  tensorboard     rayfleet runs tensorboard --run {run_dir.run_name}",
            *ledger_lines,
        ]
    )
