"""`make run` with `launcher:` recipes of unmodified Hugging Face scripts (recipes/examples/accelerate and
hf-trainer) on the real local test cluster: one launcher per worker node, ranks on both worker nodes. A failing
rank fails the run the same way whatever the launcher (the node's exit code, its output): the torchrun run of
tests/integration/test_recipe_launchers.py shows it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, worker_node_ids

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
