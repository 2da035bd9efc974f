"""`launcher: torchrun` recipes on the real local test cluster: one torchrun per worker node, placed at once.

The cluster is the session's (head with no CPUs, two worker nodes of 1 CPU, token auth). The script is
recipes/examples/torch-ddp/train.py, unmodified; what it saw is in ranks/rank-<R>.json of the run.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.integration.helpers import (
    REPO,
    ctrl_c_on_failure,
    ctrl_c_reaches_it,
    left_running,
    still_running_after,
    worker_node_ids,
)

pytestmark = pytest.mark.integration
EXAMPLE = REPO / "recipes" / "examples" / "torch-ddp"


def copy_example(tmp_path: Path, **changes) -> Path:
    code = tmp_path / "example"
    shutil.copytree(EXAMPLE, code)
    recipe = {
        "name": "example-torch-ddp",
        "entrypoint": "train.py",
        "launcher": "torchrun",
        "resources": {"workers": 2, "cpus_per_worker": 1},
        "storage": str(tmp_path / "runs"),
        **changes,
    }
    (code / "recipe.yaml").write_text(json.dumps(recipe))
    return code / "recipe.yaml"


def make_run(env: dict, recipe: Path, run: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "run", f"RECIPE={recipe}", "ON=local", f"NAME={run}", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def rank_environments(run: str) -> list[dict[str, str]]:
    """The environments of this run's rank processes (those torchrun gave a RANK), read from /proc."""
    seen = []
    for pid in left_running(run):
        try:
            raw = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        env = dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)
        if "RANK" in env and "TORCHELASTIC_RUN_ID" in env and "API_KEY" in env:
            seen.append(env)
    return seen


def output_reaches(proc: subprocess.Popen, marker: str, lines: list[str], timeout_s: float) -> bool:
    """Whether a line of `proc`'s output with `marker` comes within `timeout_s` (the lines up to it appended to
    `lines`). The deadline holds even when the process prints nothing more: a thread reads, this waits."""
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                seen.set()
                return

    threading.Thread(target=read, daemon=True).start()
    return seen.wait(timeout_s)


def ranks(run_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((run_dir / "ranks").glob("rank-*.json"))]


def test_torchrun_runs_once_per_worker_node_and_trains(cluster_env, tmp_path):
    recipe = copy_example(tmp_path, args=["--steps", "20"])
    result = make_run(cluster_env, recipe, "torch-two-nodes")
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-5000:]
    run_dir = tmp_path / "runs" / "torch-two-nodes"
    seen = ranks(run_dir)
    assert [s["rank"] for s in seen] == [0, 1] and {s["world_size"] for s in seen} == {2}
    assert [s["RAYFLEET_NODE_RANK"] for s in seen] == ["0", "1"]
    assert {s["LOCAL_RANK"] for s in seen} == {"0"} and {s["LOCAL_WORLD_SIZE"] for s in seen} == {"1"}
    assert len({(s["MASTER_ADDR"], s["MASTER_PORT"]) for s in seen}) == 1
    used = [s["RAYFLEET_RAY_NODE_ID"] for s in seen]
    assert len(set(used)) == 2 and set(used) == worker_node_ids(cluster_env), used  # the workers, not the head
    assert all((Path(s["cwd"]) / "train.py").is_file() for s in seen)  # the unpacked code, as at home
    for s in seen:
        assert s["losses"][-1] < s["losses"][0] / 2, s["losses"]
    assert "[node 0] step 10/20 loss" in result.stdout and "[node 0] done: 20 steps" in result.stdout
    assert result.stdout.count("[node 0] done: 20 steps") == 1  # each line once
    assert result.stdout.count("[node 1] rank 1/2 ready on") == 1 and "[node 0] rank 0/2 ready on" in result.stdout
    assert (run_dir / "checkpoint" / "state.pt").is_file()
    assert "[node 0] done: 20 steps" in (run_dir / "driver.log").read_text()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "SUCCEEDED" and record["exit_code"] == 0
    assert "rayfleet.node.driver.multinode --launcher torchrun" in record["entrypoint"]
    assert still_running_after("torch-two-nodes") == []


def test_a_failing_rank_is_launched_again_resumes_and_then_fails_the_run_with_its_traceback(cluster_env, tmp_path):
    """Rank 1 raises at step 12 on every attempt; max_restarts=1. Proves: a failing rank stops every node's
    launcher (rank 0 would run 400 steps) and the attempt ends; the restart launches both nodes again and the
    script resumes from its step-10 checkpoint; the second failure fails the run with rank 1's own traceback
    first, torchrun's summary, the script's traceback unprefixed on stderr, FAILED/exit 1, nothing left
    running. (It merges the former failing-rank and max-restarts runs.)"""
    recipe = copy_example(tmp_path, args=["--steps", "400", "--fail-rank", "1", "--fail-at-step", "12"], max_restarts=1)
    result = make_run(cluster_env, recipe, "torch-rank1-fails")
    assert result.returncode != 0, result.stdout[-3000:] + result.stderr[-3000:]
    first, second = result.stdout.split("attempt 1 failed; launching again (1/1 restarts)", 1)
    assert "[node 0] rank 0/2 ready on" in first and "[node 1] rank 1/2 ready on" in first
    assert "[node 0] rank 0/2 ready on" in second and "[node 1] rank 1/2 ready on" in second  # both again
    assert "[node 0] resuming from the checkpoint of step 10" in second
    report = second.split("[rayfleet] error: node 1 exited 1; its output:", 1)[1]
    # rank 1's own traceback first, then torchrun's summary naming it, after the other node has stopped
    assert "[node 1] [rank1]: RuntimeError: injected failure on rank 1 at step 12" in report
    assert "raise RuntimeError" in report and "[node 1]   rank      : 1 (local_rank: 0)" in report
    assert "[node 0]" not in report
    # and the traceback rayfleet run prints on stderr is the script's own, unprefixed
    assert "\nRuntimeError: injected failure on rank 1 at step 12" in result.stderr, result.stderr[-3000:]
    record = json.loads((tmp_path / "runs" / "torch-rank1-fails" / "run.json").read_text())
    assert record["state"] == "FAILED" and record["exit_code"] == 1
    assert not (tmp_path / "runs" / "torch-rank1-fails" / "ranks").exists()  # rank 0 never finished its 400 steps
    assert still_running_after("torch-rank1-fails") == []


def test_stopping_the_run_stops_every_nodes_processes(cluster_env, tmp_path):
    """Ctrl-C on the verb stops every node's launcher and ranks, the record says STOPPED. While it runs, each
    node's ranks hold the recipe's secret resolved on their node (the launchers start through
    rayfleet.recipes.job_entry), while what Ray holds (the job's runtime_env) has only the reference.
    (It merges the former secret-per-node run.)"""
    value = "launcher-secret-0123456789"
    env = {"API_KEY": {"secret": "env:TEST_LAUNCHER_KEY"}}
    recipe = copy_example(tmp_path, args=["--steps", "100000", "--checkpoint-every", "1000"], env=env)
    proc = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.cli.main", "run", str(recipe), "--on", "local", "--name", "torch-stop"],
        env={**cluster_env, "TEST_LAUNCHER_KEY": value}, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    lines: list[str] = []
    with ctrl_c_on_failure(proc):
        assert output_reaches(proc, "[node 0] step 10/", lines, timeout_s=300), "".join(lines)[-3000:]
        assert len(left_running("torch-stop")) >= 4, "".join(lines)[-3000:]  # two launchers, two ranks at least
        ranks_seen = rank_environments("torch-stop")
        assert sorted(e["RANK"] for e in ranks_seen) == ["0", "1"]
        assert len({e["RAYFLEET_RAY_NODE_ID"] for e in ranks_seen}) == 2  # one rank on each worker node
        for seen in ranks_seen:
            assert seen["API_KEY"] == value  # resolved on its node
            assert value not in seen["RAYFLEET_SECRET_REFS"]
            assert json.loads(seen["RAYFLEET_SECRET_REFS"])["API_KEY"].startswith("file:")
        proc.send_signal(signal.SIGINT)  # Ctrl-C on make run
        rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(lines)[-2000:] + rest[-3000:]
    assert still_running_after("torch-stop") == []
    record = json.loads((tmp_path / "runs" / "torch-stop" / "run.json").read_text())
    assert record["state"] == "STOPPED"
    assert value not in "".join(lines) + rest
