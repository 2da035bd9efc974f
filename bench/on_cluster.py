"""What the benchmarks that submit to a local Ray cluster share: the cluster, and one timed command."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from rayfleet.local import cluster as local_cluster


@contextlib.contextmanager
def local_cluster_state() -> Iterator[local_cluster.ClusterState]:
    """The running `rayfleet cluster up` cluster, else one of 2 workers x 1 CPU started here and stopped after."""
    state = local_cluster.running()
    if state is not None:
        yield state
        return
    print("starting a local cluster for the benchmark (2 workers x 1 CPU) ...", flush=True)
    state = local_cluster.up(local_cluster.ClusterSpec.from_env(workers=2, cpus_per_worker=1.0), quiet=True)
    try:
        yield state
    finally:
        local_cluster.down(quiet=True)


def timed(cmd: list[str], env: dict, cwd: Path, expect: str) -> float:
    """Wall seconds of `cmd`; exits with its output if it fails or does not print `expect`."""
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    elapsed = time.perf_counter() - start
    if result.returncode != 0 or expect not in result.stdout:
        raise SystemExit(f"{cmd[:4]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
    return elapsed
