"""Where the seconds of one run start go: the job's own lines beside Ray's task events, on one clock.

    python -m bench.run_start --timeline                   # make bench BENCH=run-start BENCH_ARGS=--timeline

One direct DDP run (`python -m rayfleet.train.ddp`, one step, as bench/run_start.py times it) on the local
cluster. Its output lines are stamped as they arrive; after it ends, Ray's state API lists the tasks and
actors the cluster ran for it (Ray Train's controller, its worker group and helper actors, rayfleet's own),
each with when it was created, when its process started running it and when it finished. Every actor
creation is a new Python process that imports Ray (and, for the controller and workers, torch and Ray
Train): on a small machine those processes contend for the same cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

# Ray's state API, asked from a process of its own (the benchmark never joins the cluster as a driver).
LIST_TASKS = """
import json, ray
from ray.util.state import list_tasks
ray.init(address="auto", logging_level="ERROR")
events = []
for task in list_tasks(detail=True, limit=10000, raise_on_missing_output=False):
    for event in task.events or []:
        events.append([event["created_ms"], task.func_or_class_name, task.type, event["state"], task.worker_pid])
print(json.dumps(events))
"""
# Actor tasks that run all along or poll: not phases of the start.
NOT_PHASES = ("poll_status", "get_status", ".beat", "verdict", "get_metadata")


def run_lines(cmd: list[str], env: dict, cwd: Path) -> tuple[float, list[tuple[float, str]], float]:
    """Runs `cmd`: its start (wall clock), each output line with the seconds since then, and its exit's."""
    t0 = time.time()
    lines = []
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        lines.append((time.time() - t0, line.rstrip()))
    if proc.wait() != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} failed:\n" + "\n".join(text for _, text in lines[-40:]))
    return t0, lines, time.time() - t0


def first_marks(lines: list[tuple[float, str]], marks: dict[str, str]) -> dict[str, float]:
    """The seconds of the first line holding each mark (marks never printed are left out)."""
    found = {name: next((at for at, text in lines if mark in text), None) for name, mark in marks.items()}
    return {name: at for name, at in found.items() if at is not None}


def ray_spans(env: dict, t0: float) -> list[tuple[float, float | None, float | None, str]]:
    """(created, running, finished) seconds after t0 for each task or actor creation since t0."""
    result = subprocess.run([sys.executable, "-c", LIST_TASKS], env=env, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"Ray's state API did not answer:\n{result.stderr[-2000:]}")
    spans: dict[tuple[str, int | None], dict[str, float]] = {}
    for created_ms, name, kind, state, pid in json.loads(result.stdout.strip().splitlines()[-1]):
        if created_ms is None or created_ms / 1000 < t0 or any(part in name for part in NOT_PHASES):
            continue
        label = f"{name} (new process)" if kind == "ACTOR_CREATION_TASK" else name
        spans.setdefault((label, pid), {}).setdefault(state, created_ms / 1000 - t0)
    rows = []
    for (label, _), states in spans.items():
        finished = states.get("FINISHED", states.get("FAILED"))
        rows.append((min(states.values()), states.get("RUNNING"), finished, label))
    return sorted(rows, key=lambda row: row[0])


def phase_table(cmd: list[str], env: dict, cwd: Path, marks: dict[str, str]) -> str:
    t0, lines, end = run_lines(cmd, env, cwd)
    table = ["| s from submission | what | process running at | done at |", "|---|---|---|---|"]
    events = [(at, f"job line: {name}", None, None) for name, at in first_marks(lines, marks).items()]
    events += [(at, label, running, done) for at, running, done, label in ray_spans(env, t0)]
    events.append((end, "the command exits", None, None))
    for at, what, running, done in sorted(events, key=lambda e: e[0]):
        cells = [f"{at:.2f}", what, "" if running is None else f"{running:.2f}", "" if done is None else f"{done:.2f}"]
        table.append("| " + " | ".join(cells) + " |")
    return "\n".join(table)
