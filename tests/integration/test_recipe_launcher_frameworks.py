"""`rayfleet run` with `launcher:` recipes of unmodified Hugging Face scripts (recipes/examples/accelerate and
hf-trainer) on the real local test cluster: one launcher per worker node, ranks on both worker nodes. A failing
rank fails the run the same way whatever the launcher (the node's exit code, its output): the torchrun run of
tests/integration/test_recipe_launchers.py shows it with a restart, and accelerate's run here without one
(`accelerate launch` wraps torch's elastic agent with its own process and exit path)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, still_running_after, worker_node_ids

pytestmark = pytest.mark.integration

EXAMPLES = REPO / "recipes" / "examples"


def make_run(env: dict, recipe: Path, storage: Path, run: str, args: str = "") -> subprocess.CompletedProcess:
    command = ["make", "--no-print-directory", "run", f"RECIPE={recipe}", "ON=local", f"NAME={run}"]
    command += [f"SET=storage={storage}", *([f"ARGS={args}"] if args else [])]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=600)


def check_ranks_on_both_workers(env: dict, result: subprocess.CompletedProcess, run_dir: Path) -> None:
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ranks = [json.loads((run_dir / "ranks" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["world_size"] for r in ranks} == {2}
    assert [r["RAYFLEET_NODE_RANK"] for r in ranks] == ["0", "1"]
    assert {r["RAYFLEET_ATTEMPT"] for r in ranks} == {"1"}
    nodes = [r["RAYFLEET_RAY_NODE_ID"] for r in ranks]
    assert nodes[0] != nodes[1] and set(nodes) == worker_node_ids(env)  # one per worker node, not the head
    for r in ranks:
        assert r["LOCAL_RANK"] == "0" and r["LOCAL_WORLD_SIZE"] == "1"
        assert r["losses"] and r["losses"][-1] < r["losses"][0], r["losses"]
    assert "[node 0] " in result.stdout and "[node 1] " in result.stdout
    assert "[node 0] done:" in result.stdout  # rank 0's own last line, followed live
    assert "[node 0] done:" in (run_dir / "driver.log").read_text()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "SUCCEEDED" and record["exit_code"] == 0


def test_accelerate_script_runs_on_both_worker_nodes(cluster_env, tmp_path):
    storage = tmp_path / "runs"
    result = make_run(cluster_env, EXAMPLES / "accelerate" / "recipe.yaml", storage, "accelerate-ok")
    check_ranks_on_both_workers(cluster_env, result, storage / "accelerate-ok")
    rank = json.loads((storage / "accelerate-ok" / "ranks" / "rank-1.json").read_text())
    assert rank["distributed_type"] == "DistributedType.MULTI_CPU"  # ACCELERATE_USE_CPU: gloo across nodes
    assert len(rank["losses"]) == 40


def test_hf_trainer_runs_on_both_worker_nodes(cluster_env, tiny, tmp_path):
    """On the session's tiny GPT-NeoX and corpus (the FSDP runs' own)."""
    storage = tmp_path / "runs"
    args = f"--model {tiny['model']} --text {tiny['data']}"
    result = make_run(cluster_env, EXAMPLES / "hf-trainer" / "recipe.yaml", storage, "hf-trainer-ok", args)
    check_ranks_on_both_workers(cluster_env, result, storage / "hf-trainer-ok")
    rank = json.loads((storage / "hf-trainer-ok" / "ranks" / "rank-0.json").read_text())
    assert len(rank["losses"]) == 10  # logging_steps=1, --max-steps 10


def test_a_failing_accelerate_rank_fails_the_run_with_its_error_and_stops_the_other_node(cluster_env, tmp_path):
    """The unmodified Accelerate example, rank 1 raising at step 2 of 40 (max_restarts 0). What only this run
    shows: `accelerate launch`'s own exit path carries a rank's failure to rayfleet: one launch per node and no
    second, rank 0 stopped before it could finish, the failure named rank 1's with its own
    traceback (not the other node's that followed it), the script's traceback as the tail on stderr, FAILED
    exit 1 in one submission, nothing left running. (Torchrun's path, with a restart, is
    tests/integration/test_recipe_launchers.py's.)"""
    storage, run = tmp_path / "runs", "accelerate-fails"
    result = make_run(
        cluster_env, EXAMPLES / "accelerate" / "recipe.yaml", storage, run, "--fail-rank 1 --fail-at-step 2"
    )
    out = result.stdout + result.stderr
    assert f"error: run {run} failed (exit 1)" in result.stderr, out[-5000:]
    launched = [line.split(":")[0] for line in result.stdout.splitlines() if line.endswith(" runs accelerate")]
    assert launched == ["[rayfleet] node 0", "[rayfleet] node 1"] and "launching again" not in out, out[-5000:]
    # Rank 0 fails too once its peer is gone (or is stopped first): the node named is the one that failed first.
    assert "[rayfleet] error: node 1 exited 1; its output:" in result.stdout, out[-5000:]
    report = result.stdout.split("[rayfleet] error: node 1 exited 1; its output:", 1)[1]
    assert "[node 1] [rank1]: RuntimeError: injected failure on rank 1 at step 2" in report
    assert "[node 1]   rank      : 1 (local_rank: 0)" in report and "[node 0]" not in report
    assert result.stderr.count("[rayfleet] error: node") == 0 and result.stdout.count("[rayfleet] error: node") == 1
    assert "\nRuntimeError: injected failure on rank 1 at step 2" in result.stderr  # the script's own traceback
    run_dir = storage / run
    assert not (run_dir / "ranks").exists()  # rank 0 never got to its 40th step
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "FAILED" and record["exit_code"] == 1, record
    assert [(a["attempt"], a["state"], a["exit_code"]) for a in record["attempts"]] == [(1, "FAILED", 1)]
    assert still_running_after(run) == []
