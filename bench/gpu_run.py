"""bench.gpu's machinery: the clock and its budget, the table as it grows, one stage as a process group with a
timeout, the runner that turns a pair's two stages into figures or failure texts, the probe and the cluster."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench import gpu_report as report

if TYPE_CHECKING:
    from bench.gpu_plan import Pair, Settings

REPO = Path(__file__).resolve().parents[1]
TITLE = "rayfleet on one GPU: the jobs through Ray Train beside their step benches"
MIN_STEP_S = 20  # a stage that would get less of the budget is skipped
STOP_GRACE_S = 15
PROBE = """\
import json, torch
cuda = torch.cuda.is_available()
info = {"torch": torch.__version__, "cuda": cuda, "gpus": torch.cuda.device_count() if cuda else 0,
        "device_name": torch.cuda.get_device_name(0) if cuda else "cpu"}
try:
    import ray
    info["ray"] = ray.__version__
except Exception as exc:
    info["ray"] = f"not importable ({type(exc).__name__})"
print("PROBE " + json.dumps(info))
"""


@dataclass(frozen=True)
class Step:
    """One stage: `python <argv>` in its own process, with its timeout (and its usual seconds on an H100)."""

    key: str
    kind: str  # probe, data, model, ddp-bench, ddp-job, fsdp-bench, fsdp-job
    argv: tuple[str, ...]
    timeout_s: float
    typical_s: float = 0.0
    run_name: str | None = None  # a job's


class Clock:
    def __init__(self, budget_s: float = 0.0):
        self.start, self.budget_s = time.monotonic(), budget_s

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def left(self) -> float | None:
        return self.budget_s - self.elapsed() if self.budget_s else None

    def say(self, text: str) -> None:
        print(f"[{self.elapsed():6.1f} s] {text}", file=sys.stderr, flush=True)


class Document:
    """The table as measured so far: each row printed at once; the file and results.json rewritten."""

    def __init__(self, out: Path, logs: Path, header: list[str]):
        self.out, self.logs, self.header = out, logs, header
        self.rows: list[report.Row] = []
        self.results: list[dict] = []
        self.footer: list[str] = []
        print("\n".join([f"# {TITLE}", "", *header, "", *report.table_header()]), flush=True)
        self.write()

    def add(self, row: report.Row, result: dict | None = None) -> None:
        self.rows.append(row)
        if result is not None:
            self.results.append(result)
        print(report.table_line(row), flush=True)
        self.write()

    def finish(self, footer: list[str]) -> None:
        self.footer = footer
        print("\n" + "\n".join(footer), flush=True)
        self.write()

    def write(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.out.with_name(self.out.name + ".tmp")
        tmp.write_text(report.render(TITLE, self.header, self.rows, self.footer))
        tmp.replace(self.out)
        (self.logs / "results.json").write_text(json.dumps(self.results, indent=2, default=str) + "\n")


@dataclass
class Outcome:
    ok: bool
    seconds: float
    output: str
    error: str = ""


def run_step(step: Step, env: dict, log: Path, timeout: float, clock: Clock) -> Outcome:
    """`step` in its own process group, its output into `log`; the whole group stopped at `timeout`."""
    cmd = [sys.executable, *step.argv]
    clock.say(f"{step.key}: start (timeout {timeout:.0f} s; log {log})")
    started = time.monotonic()
    with open(log, "w") as out:
        out.write(f"$ {shlex.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO,
            start_new_session=True,
        )  # fmt: skip
        try:
            rc, timed_out = proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            _stop(proc)
            rc, timed_out = proc.returncode, True
        except BaseException:  # Ctrl-C, SIGTERM: the stage goes with us
            _stop(proc)
            raise
    seconds = time.monotonic() - started
    output = log.read_text(errors="replace")
    if timed_out:
        error = f"timeout after {timeout:.0f} s (last: {report.last_error_line(output)})"
    elif rc != 0:
        error = f"exit {rc}: {report.last_error_line(output)}"
    else:
        clock.say(f"{step.key}: done in {seconds:.1f} s")
        return Outcome(True, seconds, output)
    clock.say(f"{step.key}: FAILED after {seconds:.1f} s: {error}")
    return Outcome(False, seconds, output, error)


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the stage's own process group (start_new_session), SIGKILL after a grace period."""
    for sig, grace in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class Runner:
    """Runs a pair's bench and job within the budget; each gives its figures (a dict) or a failure text."""

    def __init__(self, settings: Settings, clock: Clock, logs: Path):
        self.settings, self.clock, self.logs = settings, clock, logs
        self.bench_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.job_env: dict | None = None
        self.no_job = "no Ray cluster"
        self.setup_failed: dict[str, str] = {}  # family -> why its jobs cannot run

    def budget(self, step: Step, optional_need: float | None = None) -> tuple[float | None, str]:
        """(the timeout to run `step` with, ""), or (None, why it is skipped)."""
        left = self.clock.left()
        if left is None:
            return step.timeout_s, ""
        if optional_need is not None and left < optional_need:
            return None, f"skipped: {left:.0f} s of the budget left, this needs about {optional_need:.0f} s"
        if left < MIN_STEP_S:
            return None, f"skipped: the {self.clock.budget_s:.0f} s budget is spent (--budget)"
        return min(step.timeout_s, left), ""

    def step(self, step: Step, env: dict) -> Outcome | str:
        timeout, why = self.budget(step)
        if timeout is None:
            self.clock.say(f"{step.key}: {why}")
            return why
        outcome = run_step(step, env, self.logs / f"{step.key}.log", timeout, self.clock)
        return outcome if outcome.ok else report.failed(outcome.error)

    def bench(self, pair: Pair) -> dict | str:
        outcome = self.step(pair.bench, {**self.bench_env, "MASTER_PORT": str(free_port())})
        if isinstance(outcome, str):
            return outcome
        try:
            if pair.family == "ddp":
                return report.ddp_bench(outcome.output, pair.bench_variant)
            return report.fsdp_bench(outcome.output)
        except report.BenchOutputError as exc:
            return report.failed(f"{exc}; last line: {report.last_error_line(outcome.output)}")

    def job(self, pair: Pair) -> dict | str:
        if pair.family in self.setup_failed:
            return report.failed(self.setup_failed[pair.family])
        if self.job_env is None:
            return report.failed(self.no_job)
        outcome = self.step(pair.job, self.job_env)
        run_dir = self.settings.work / "runs" / pair.job.run_name
        rows = read_rows(run_dir / "metrics.jsonl")
        if pair.family == "fsdp" and not self.settings.keep_checkpoints:
            drop_checkpoints(run_dir)  # about 17 GB each at 1.4B parameters: a few runs would fill the disk
        if isinstance(outcome, str):
            return report.partial(outcome, pair.family, rows)
        if not rows:
            return report.failed(f"no metrics rows in {run_dir / 'metrics.jsonl'}")
        return report.ddp_job(rows) if pair.family == "ddp" else report.fsdp_job(rows)


def read_rows(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def drop_checkpoints(run_dir: Path) -> None:
    for path in run_dir.glob("checkpoint*"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def probe(clock: Clock, logs: Path, timeout: float) -> dict:
    """torch's version and device, Ray's version: asked in a process of its own (no CUDA context held here)."""
    step = Step("probe", "probe", ("-c", PROBE), timeout)
    outcome = run_step(step, {**os.environ, "PYTHONUNBUFFERED": "1"}, logs / "probe.log", timeout, clock)
    for line in outcome.output.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line.removeprefix("PROBE "))
    return {"error": outcome.error or "no PROBE line", "cuda": False, "gpus": 0}
