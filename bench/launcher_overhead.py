"""What a `launcher: torchrun` recipe costs on top of starting the same script with torchrun by hand.

    python -m bench.launcher_overhead [--repeats 2] [--steps 20]      # make bench BENCH=launcher

Interleaved in one run, on one local cluster (the running `rayfleet cluster up`, else one of 2 workers x 1 CPU
started for the benchmark), the unmodified recipes/examples/torch-ddp/train.py:
  by hand:  `torchrun --nproc-per-node 2 train.py` on this machine (two local processes, gloo);
  recipe:   `rayfleet run` of the example's recipe: validate, package, Jobs API, place one
            bundle per worker node, one torchrun per node (world size 2), follow, record.
Prints wall seconds (medians of --repeats), the overhead per run and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench.on_cluster import local_cluster_state, timed

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "recipes" / "examples" / "torch-ddp"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args(argv)
    expect = f"done: {args.steps} steps"
    with local_cluster_state() as state, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copytree(EXAMPLE, work / "code")
        recipe = {
            "name": "bench-launcher",
            "code": "code",
            "entrypoint": "train.py",
            "launcher": "torchrun",
            "args": ["--steps", str(args.steps)],
            "storage": str(work / "runs"),
            "resources": {"workers": 2, "cpus_per_worker": 1},
        }
        (work / "recipe.yaml").write_text(json.dumps(recipe))
        env = {**os.environ, "RAY_ADDRESS": state.address, "PYTHONPATH": str(REPO)}
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "train.py"]
        run = [sys.executable, "-m", "rayfleet.cli.main", "run", str(work / "recipe.yaml"), "--on", "local"]
        by_hand, via_recipe = [], []
        for i in range(args.repeats):
            print(f"repeat {i + 1}/{args.repeats} ...", flush=True)
            hand_env = {**env, "RAYFLEET_RUN_DIR": str(work / f"hand-{i}")}
            by_hand.append(timed([*torchrun, "--steps", str(args.steps)], hand_env, work / "code", expect))
            via_recipe.append(timed([*run, "--name", f"bench-{i}"], env, REPO, expect))
    h, r = statistics.median(by_hand), statistics.median(via_recipe)
    print()
    print(f"| {'what':<52} | {'median s':>9} | {'vs by hand':>10} |")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 12}|")
    print(f"| {'by hand: torchrun --nproc-per-node 2 train.py':<52} | {h:>9.2f} | {1.0:>9.2f}x |")
    print(f"| {'recipe: launcher torchrun, 2 worker nodes x 1 process':<52} | {r:>9.2f} | {r / h:>9.2f}x |")
    print(f"| {'overhead per run':<52} | {r - h:>9.2f} | {'':>10} |")
    print(f"\n{args.steps} steps of recipes/examples/torch-ddp/train.py; medians of {args.repeats}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
