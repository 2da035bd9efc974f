"""What a recipe run costs on top of running the same script as a Ray driver yourself.

    python -m bench.recipe_overhead [--repeats 3]          # make bench BENCH=recipe

On one local cluster (the running `rayfleet cluster up`, else one started for the benchmark), in the same run:
  direct:  `python task.py` (ray.init to the cluster, one remote task, print), as a user would by hand;
  recipe:  `rayfleet run` of a recipe with that script: validate, package, store the run
           record, submit through the Jobs API, follow the log, save driver.log and run.json.
Also the packaging of rayfleet's own ddp recipe (the whole repository's code). Medians of --repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.on_cluster import local_cluster_state, timed
from rayfleet.recipes.package import package
from rayfleet.recipes.schema import load

REPO = Path(__file__).resolve().parents[1]
TASK = """
import ray
ray.init(address="auto", logging_level="ERROR", log_to_driver=False)
@ray.remote(num_cpus=1)
def square(x):
    return x * x
print("result", ray.get(square.remote(7)))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    with local_cluster_state() as state, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "code").mkdir()
        (work / "code" / "task.py").write_text(TASK)
        recipe = {
            "name": "bench",
            "code": "code",
            "entrypoint": "task.py",
            "storage": str(work / "runs"),
            "resources": {"workers": 1, "cpus_per_worker": 1},
        }
        (work / "recipe.yaml").write_text(json.dumps(recipe))
        env = {**os.environ, "RAY_ADDRESS": state.address, "PYTHONPATH": str(REPO)}
        run = [sys.executable, "-m", "rayfleet.cli.main", "run", str(work / "recipe.yaml"), "--on", "local"]
        direct, via_recipe = [], []
        for i in range(args.repeats):
            print(f"repeat {i + 1}/{args.repeats} ...", flush=True)
            direct.append(timed([sys.executable, "task.py"], env, work / "code", "result 49"))
            via_recipe.append(timed(run, env, REPO, "result 49"))
        loaded = load(REPO / "recipes" / "ddp.yaml")
        start = time.perf_counter()
        pkg = package(loaded.code_dir, work / "ddp.zip", loaded.recipe.exclude)
        package_s = time.perf_counter() - start
        zip_bytes = pkg.path.stat().st_size
    d, r = statistics.median(direct), statistics.median(via_recipe)
    print()
    print(f"| {'what':<44} | {'median s':>9} | {'vs direct':>9} |")
    print(f"|{'-' * 46}|{'-' * 11}|{'-' * 11}|")
    print(f"| {'direct: python task.py (Ray driver)':<44} | {d:>9.2f} | {1.0:>8.2f}x |")
    print(f"| {'recipe: rayfleet run (package, Jobs API, log)':<44} | {r:>9.2f} | {r / d:>8.2f}x |")
    print(f"| {'overhead per run':<44} | {r - d:>9.2f} | {'':>9} |")
    print(
        f"\npackaging recipes/ddp.yaml: {pkg.files} files, {pkg.bytes / 1024:,.0f} KiB -> "
        f"{zip_bytes / 1024:,.0f} KiB zip in {package_s * 1000:.0f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
