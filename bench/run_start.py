"""Seconds from submitting a run to its first training step, and to the end of a 1-step run.

    python -m bench.run_start [--repeats 3] [--data DIR]          # make bench BENCH=run-start
    python -m bench.run_start --timeline                           # one run each way, phase by phase

On one local cluster (the running `rayfleet cluster up`, else one of 2 workers x 1 CPU started for the
benchmark), the DDP job on 256 generated images (one step of batch 128 on each of 2 workers, no evaluation
beyond 128 test images), timed from outside, line by line as the output arrives:
  direct:  `rayfleet cluster run -- python -m rayfleet.train.ddp ...` (what `make train-ddp ON=local` runs);
  recipe:  `rayfleet run recipes/ddp.yaml --on local` (what `make run` / `make train-ddp`
           run: package the code, submit through the Jobs API, follow the log).
Columns: the driver's "run ...: N workers" line (imports, connection, placement check, storage, tracking),
the first step's progress line (Ray Train's controller and worker group, the runtime env, the workers'
imports, data and model), and the process's exit (the step, the checkpoint, the summary). Medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.on_cluster import local_cluster_state
from bench.run_start_timeline import first_marks, phase_table, run_lines
from rayfleet.local.processes import command_env

REPO = Path(__file__).resolve().parents[1]
ONE_STEP = ["epochs=1", "train_subset=256", "test_subset=128", "eval_batch_size=128", "progress_every_s=0.001"]
MARKS = {"driver": ": 2 workers (", "first step": "step 1/1 "}
# The timeline's marks: also rank 0's line once its data and model are ready, before the first step.
TIMELINE_MARKS = {
    "driver ready": MARKS["driver"],
    "data and model ready": "training on ",
    "first step": MARKS["first step"],
}


def timeline(cmd: list[str], env: dict, cwd: Path) -> dict[str, float]:
    """Seconds from the start of `cmd` to the first line holding each mark, and to its exit."""
    _, lines, end = run_lines(cmd, env, cwd)
    seen = first_marks(lines, MARKS)
    if len(seen) != len(MARKS):
        raise SystemExit(f"{' '.join(cmd[:4])} printed no step:\n" + "\n".join(text for _, text in lines[-40:]))
    return {**seen, "end": end}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=REPO / "data", help="FashionMNIST-format data (make data)")
    parser.add_argument("--timeline", action="store_true", help="one run each way, its phases with Ray's task events")
    args = parser.parse_args(argv)
    if not (args.data / "FashionMNIST").is_dir():
        print(f"error: no FashionMNIST data in {args.data}: run `make data` first", file=sys.stderr)
        return 2
    with local_cluster_state() as state, tempfile.TemporaryDirectory() as tmp:
        env = {**command_env(state), "PYTHONUNBUFFERED": "1"}  # token auth, as `make` sets it
        job = [f"data_dir={args.data.resolve()}", f"storage={tmp}", *ONE_STEP]
        ways = {
            "direct (make train-ddp ON=local)": lambda run: [
                *[sys.executable, "-m", "rayfleet.cli.main", "cluster", "run", "--"],
                *[sys.executable, "-m", "rayfleet.train.ddp", *job, f"run_name={run}"],
            ],
            "recipe (make train-ddp)": lambda run: [
                *[sys.executable, "-m", "rayfleet.cli.main", "run", "recipes/ddp.yaml", "--on", "local"],
                *["--name", run, "--set", f"storage={tmp}", "--", *job],
            ],
        }
        if args.timeline:
            for n, (name, command) in enumerate(ways.items()):
                print(
                    f"\n{name}, one run:\n"
                    + phase_table(command(f"timeline-{n}-{int(time.time())}"), env, REPO, TIMELINE_MARKS)
                )
            return 0
        times: dict[str, list[dict[str, float]]] = {name: [] for name in ways}
        for i in range(args.repeats):
            for n, (name, command) in enumerate(ways.items()):
                print(f"repeat {i + 1}/{args.repeats}: {name} ...", flush=True)
                times[name].append(timeline(command(f"start-{i}-{n}"), env, REPO))
    print(f"\nmedians of {args.repeats}, seconds from the command's start")
    print(f"| {'how':34} | driver ready | first step | 1-step run ends |")
    print(f"|{'-' * 36}|--------------|------------|-----------------|")
    for name, rows in times.items():
        cells = [statistics.median(r[key] for r in rows) for key in ("driver", "first step", "end")]
        print(f"| {name:34} | {cells[0]:12.1f} | {cells[1]:10.1f} | {cells[2]:15.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
