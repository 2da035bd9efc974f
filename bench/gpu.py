"""The figures on one NVIDIA GPU in one run: the real jobs through Ray Train beside their step benches, one table.

    make bench BENCH=gpu                                  # = python -m bench.gpu (cuda when torch sees a GPU)
    python -m bench.gpu --device cpu                # tiny settings, a few minutes: how the command is tested
    python -m bench.gpu --only fsdp --timeout fsdp-job=600 --budget 0
    python -m bench.gpu --dry-run                   # the stages in order, their timeouts and commands

Set-up, reused from --work when there: generated FashionMNIST-format data, and a GPT-NeoX folder of --shape
(random weights, a tokenizer) with a generated corpus long enough for the FSDP jobs' steps. A local Ray cluster
(rayfleet.local.cluster: the running one, else 1 worker with the GPU, started here and stopped after). Then pair
by pair: the step bench alone (bench.ddp_step, bench.fsdp_throughput; no Ray) and the job through Ray Train
(rayfleet.train.ddp, rayfleet.train.fsdp; its figure from metrics.jsonl, the mean after the first epoch or
logged row, which include warm-up and compilation), side by side in one row.

Every stage is a process of its own with its own timeout (--timeout), its output in runs/bench-gpu/<stage>.log
(beside --out); a stage that fails or times out is a "failed: <last error line>" cell and the run goes on. Each
row is printed on stdout and --out rewritten as soon as it is measured; progress goes to stderr. The budget
(--budget, from the start) clips the timeouts, and the optional pairs (the extra DDP batches) run only if it
leaves them their usual time: the required pairs come first. What runs, and in which order: bench/gpu_plan.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import signal
import sys
from datetime import UTC, datetime
from pathlib import Path

from bench import gpu_cluster, gpu_run, gpu_setup
from bench import gpu_report as report
from bench.gpu_plan import PROFILES, SIZES, TIMEOUTS, Pair, Settings, plan, setup_steps


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=sorted(PROFILES), help="default: cuda if torch sees a GPU, else cpu")
    parser.add_argument("--shape", choices=sorted(SIZES), help="FSDP model; default: pythia-1.4b on cuda, else tiny")
    parser.add_argument("--only", default="ddp,fsdp", help="what to run, comma-separated: ddp, fsdp")
    parser.add_argument(
        "--ddp-batches",
        help="DDP batches per device: the first for every variant, the others for the marked ones if the budget "
        "allows (default: 128,256 on cuda, 32 on cpu)",
    )
    parser.add_argument("--work", type=Path, default=Path("runs/bench-gpu-work"), help="data, model, the jobs' runs")
    parser.add_argument("--out", type=Path, default=Path("runs/bench-gpu.md"), help="the table; logs in its stem/")
    parser.add_argument("--budget", type=float, help="seconds for the whole run, 0: none (default: 420 cuda, 900 cpu)")
    parser.add_argument(
        "--timeout",
        action="append",
        default=[],
        metavar="STAGE=S",
        help=f"seconds for a kind of stage ({', '.join(TIMEOUTS)}) or one stage (--dry-run names them); repeatable",
    )
    parser.add_argument("--pairs", help="only these rows, in this order: comma-separated keys (--dry-run names them)")
    parser.add_argument("--cpus", type=float, default=os.cpu_count() or 1, help="CPUs of the cluster's worker")
    parser.add_argument("--keep-checkpoints", action="store_true", help="keep the FSDP jobs' checkpoints")
    parser.add_argument("--dry-run", action="store_true", help="print the stages and exit")
    args = parser.parse_args(argv)
    try:
        args.timeouts = tuple((k.strip(), float(v)) for k, _, v in (t.partition("=") for t in args.timeout))
    except ValueError:
        parser.error(f"--timeout: expected STAGE=SECONDS, got {args.timeout}")
    args.only = frozenset(f.strip() for f in args.only.split(",") if f.strip())
    if not args.only or args.only - {"ddp", "fsdp"}:
        parser.error(f"--only: ddp and/or fsdp, got {','.join(sorted(args.only))}")
    return args


def settings_from(args: argparse.Namespace, device: str, stamp: str) -> Settings:
    profile = PROFILES[device]
    batches = tuple(int(b) for b in (args.ddp_batches or profile.ddp_batches).split(",") if b.strip())
    return Settings(
        device=device,
        shape=args.shape or ("pythia-1.4b" if device == "cuda" else "tiny"),
        ddp_batches=batches,
        only=args.only,
        work=args.work.resolve(),
        cpus=args.cpus,
        budget_s=profile.budget_s if args.budget is None else args.budget,
        stamp=stamp,
        timeouts=args.timeouts,
        keep_checkpoints=args.keep_checkpoints,
    )


def header_lines(info: dict, s: Settings, argv: list[str], now: datetime) -> list[str]:
    device = info.get("device_name") or f"unknown (probe failed: {info.get('error')})"
    gpus = f" x {info['gpus']}" if info.get("gpus", 0) > 1 else ""
    return [
        f"- device: **{device}**{gpus}; torch {info.get('torch', '?')}; Ray {info.get('ray', '?')}; "
        f"{now:%Y-%m-%d %H:%M} UTC",
        f"- command: `{shlex.join(['python', '-m', 'bench.gpu', *argv])}`",
        f"- settings: {s.describe()}",
        "- job: the real job through Ray Train, 1 worker on a local Ray cluster; step bench: the same training step "
        "alone, no Ray; both per device, on this machine in this run",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    now = datetime.now(UTC)
    out = args.out.resolve()
    logs = out.with_suffix("")
    clock = gpu_run.Clock()
    if args.dry_run:
        info = {"cuda": True}
    else:
        logs.mkdir(parents=True, exist_ok=True)
        info = gpu_run.probe(clock, logs, dict(args.timeouts).get("probe", TIMEOUTS["probe"][0]))
    running = None if args.dry_run else gpu_cluster.running_cluster()
    if running is not None:  # the jobs ask for what its worker has
        args.cpus = running.spec["cpus_per_worker"]
    s = settings_from(args, args.device or ("cuda" if info.get("cuda") else "cpu"), f"{now:%Y%m%d-%H%M%S}")
    pairs = plan(s)
    if args.pairs:
        pairs = _chosen(pairs, args.pairs)
        s = dataclasses.replace(s, only=frozenset(p.family for p in pairs))  # the set-up they need, no more
    if args.dry_run:
        for step in [*setup_steps(s), *(step for p in pairs for step in (p.bench, p.job))]:
            print(f"{step.key:<26} {step.timeout_s:>5.0f} s  python {shlex.join(step.argv)}")
        return 0
    clock.budget_s = s.budget_s
    doc = gpu_run.Document(out, logs, header_lines(info, s, argv, now))
    runner = gpu_run.Runner(s, clock, logs)
    notes: list[str] = []
    previous = signal.signal(signal.SIGTERM, _interrupt)
    started_cluster, code = "", 0
    try:
        _setup(s, runner, doc, notes)
        try:
            t0 = clock.elapsed()
            state, started_cluster = gpu_cluster.start_cluster(
                s.cpus, info.get("gpus", 0) if s.device == "cuda" else 0, clock
            )
            runner.job_env = gpu_cluster.job_env(state)
            how = {"": "reused", "local": "started", "bare": "started (one bare head)"}[started_cluster]
            notes.append(f"Ray cluster {how} in {clock.elapsed() - t0:.0f} s")
        except Exception as exc:  # ClusterError, or whatever `ray start` threw: the benches still run
            runner.no_job = f"no Ray cluster ({report.last_error_line(str(exc))})"
            doc.add(report.Row("Ray cluster", job=report.failed(str(exc))))
        for pair in pairs:
            _run_pair(pair, runner, doc, clock)
    except KeyboardInterrupt:
        clock.say("interrupted: stopping")
        notes.append("INTERRUPTED before the end")
        code = 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        if started_cluster:
            gpu_cluster.stop_cluster(clock, started_cluster)
    doc.finish([f"Set-up: {'; '.join(notes) or '-'}. Total {clock.elapsed():.0f} s. Logs: {logs}/"])
    clock.say(f"table written to {out}")
    return code


def _chosen(pairs: list[Pair], keys: str) -> list[Pair]:
    by_key = {p.key: p for p in pairs}
    wanted = [k.strip() for k in keys.split(",") if k.strip()]
    if unknown := [k for k in wanted if k not in by_key]:
        print(f"bench.gpu: --pairs: no pair {', '.join(unknown)} (there are: {', '.join(by_key)})", file=sys.stderr)
        raise SystemExit(2)
    return [by_key[k] for k in wanted]


def _setup(s: Settings, runner: gpu_run.Runner, doc: gpu_run.Document, notes: list[str]) -> None:
    for step in setup_steps(s):
        if step.kind == "data" and s.data_present():
            notes.append(f"data reused ({s.data_dir})")
            continue
        if step.kind == "model" and gpu_setup.is_built(*s.model_paths(), s.model_spec()):
            notes.append(f"model reused ({s.model_paths()[0]})")
            continue
        outcome = runner.step(step, runner.bench_env)
        if isinstance(outcome, str):
            runner.setup_failed["ddp" if step.kind == "data" else "fsdp"] = f"set-up ({step.key}) {outcome}"
            doc.add(report.Row(f"set-up: {step.key}", job=outcome, notes=f"log: {runner.logs / step.key}.log"))
        else:
            notes.append(f"{step.key} built in {outcome.seconds:.0f} s")


def _run_pair(pair: Pair, runner: gpu_run.Runner, doc: gpu_run.Document, clock: gpu_run.Clock) -> None:
    if pair.optional:
        _, why = runner.budget(pair.bench, optional_need=pair.bench.typical_s + pair.job.typical_s)
        if why:
            clock.say(f"{pair.key}: {why}")
            doc.add(report.Row(pair.what, job=why, bench=why))
            return
    clock.say(f"== {pair.what}")
    row_for = report.ddp_row if pair.family == "ddp" else report.fsdp_row
    bench = runner.bench(pair)
    try:
        job = runner.job(pair)
    except KeyboardInterrupt:  # the bench's figure is kept
        doc.add(row_for(pair.what, "interrupted", bench), {"key": pair.key, "bench": bench})
        raise
    row = row_for(pair.what, job, bench)
    doc.add(row, {"key": pair.key, "what": pair.what, "job": job, "bench": bench})
    if pair.checkpoint_row:
        doc.add(report.checkpoint_row(f"{pair.what}: checkpoint pause (max)", job))


def _interrupt(signum, frame):
    raise KeyboardInterrupt  # SIGTERM (make, a CI or device timeout): stop the stage and the cluster, keep the table


if __name__ == "__main__":
    sys.exit(main())
