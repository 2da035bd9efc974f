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
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, ctrl_c_on_failure, ctrl_c_reaches_it, left_running, worker_node_ids

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
        ["make", "--no-print-directory", "run", f"RECIPE={recipe}", "TARGET=local", f"RUN={run}", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


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
    assert "scripts.recipes.multinode --launcher torchrun" in record["entrypoint"]
    assert left_running("torch-two-nodes") == []


def test_a_failing_rank_stops_every_node_and_fails_with_its_traceback(cluster_env, tmp_path):
    recipe = copy_example(tmp_path, args=["--steps", "400", "--fail-rank", "1", "--fail-at-step", "3"])
    started = time.monotonic()
    result = make_run(cluster_env, recipe, "torch-rank1-fails")
    print(f"\nfailure to exit: {time.monotonic() - started:.0f}s")
    assert result.returncode != 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = result.stdout.split("[rayfleet] error: node 1 exited 1; its output:", 1)[1]
    # rank 1's own traceback first, then torchrun's summary naming it, after the other node has stopped
    assert "[node 1] [rank1]: RuntimeError: injected failure on rank 1 at step 3" in report
    assert "raise RuntimeError" in report and "[node 1]   rank      : 1 (local_rank: 0)" in report
    assert "[node 0]" not in report
    # and the traceback make run prints on stderr is the script's own, unprefixed
    assert "\nRuntimeError: injected failure on rank 1 at step 3" in result.stderr, result.stderr[-3000:]
    record = json.loads((tmp_path / "runs" / "torch-rank1-fails" / "run.json").read_text())
    assert record["state"] == "FAILED" and record["exit_code"] == 1
    assert not (tmp_path / "runs" / "torch-rank1-fails" / "ranks").exists()  # rank 0 never finished its 400 steps
    assert left_running("torch-rank1-fails") == []


def test_max_restarts_launches_every_node_again_and_the_script_resumes(cluster_env, tmp_path):
    args = ["--steps", "20", "--fail-rank", "1", "--fail-at-step", "12", "--fail-once"]
    recipe = copy_example(tmp_path, args=args, max_restarts=1)
    result = make_run(cluster_env, recipe, "torch-restarted")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-3000:]
    assert "attempt 1 failed; launching again (1/1 restarts)" in result.stdout
    assert "[node 0] resuming from the checkpoint of step 10" in result.stdout
    seen = ranks(tmp_path / "runs" / "torch-restarted")
    assert [(s["RAYFLEET_ATTEMPT"], s["start_step"], len(s["losses"])) for s in seen] == [("2", 10, 10)] * 2


def test_stopping_the_run_stops_every_nodes_processes(cluster_env, tmp_path):
    recipe = copy_example(tmp_path, args=["--steps", "100000", "--checkpoint-every", "1000"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "scripts.recipes.run", str(recipe), "--target", "local", "--run-name", "torch-stop"],
        env=cluster_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=ctrl_c_reaches_it,
    )  # fmt: skip
    lines = []
    with ctrl_c_on_failure(proc):
        deadline = time.monotonic() + 300
        for line in proc.stdout:
            lines.append(line)
            if "[node 0] step 10/" in line:
                break
            assert time.monotonic() < deadline, "".join(lines)[-3000:]
        assert len(left_running("torch-stop")) >= 4, "".join(lines)[-3000:]  # two launchers, two ranks at least
        proc.send_signal(signal.SIGINT)  # Ctrl-C on make run
        rest, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, "".join(lines)[-2000:] + rest[-3000:]
    deadline = time.monotonic() + 120
    while left_running("torch-stop") and time.monotonic() < deadline:
        time.sleep(1)
    assert left_running("torch-stop") == []
    record = json.loads((tmp_path / "runs" / "torch-stop" / "run.json").read_text())
    assert record["state"] == "STOPPED"


# Ray Train moves its workers into a per-run directory unless RAY_CHDIR_TO_TRIAL_DIR=0, which recipe runs
# set: a train function that opens a file relative to the code works as it does at home.
RELATIVE_FILE_SCRIPT = textwrap.dedent("""
    import os
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    def loop(config):
        import ray.train
        with open("data/values.txt") as f:
            total = sum(int(v) for v in f.read().split())
        print(f"rank {ray.train.get_context().get_world_rank()} read total {total} in {os.getcwd()}")

    TorchTrainer(loop, scaling_config=ScalingConfig(num_workers=2),
                 run_config=RunConfig(name="t", storage_path=os.environ["RAYFLEET_RUN_DIR"])).fit()
""")


def test_a_ray_train_function_opens_files_relative_to_the_code(cluster_env, tmp_path):
    code = tmp_path / "code"
    (code / "data").mkdir(parents=True)
    (code / "data" / "values.txt").write_text("1 2 3 36\n")
    (code / "train.py").write_text(RELATIVE_FILE_SCRIPT)
    recipe = {"name": "relative", "entrypoint": "train.py", "storage": str(tmp_path / "runs")}
    (code / "recipe.yaml").write_text(json.dumps(recipe))
    result = make_run(cluster_env, code / "recipe.yaml", "relative-files")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    for rank in (0, 1):  # each Ray Train worker, in the unpacked code (Ray's working_dir), not a run directory
        line = result.stdout.split(f"rank {rank} read total 42 in ", 1)[1].splitlines()[0]
        assert "/runtime_resources/working_dir_files/_ray_pkg_" in line, line


SECRET_SCRIPT = textwrap.dedent("""
    import hashlib, json, os
    rank = os.environ["RANK"]
    seen = {"sha": hashlib.sha256(os.environ["API_KEY"].encode()).hexdigest(),
            "refs": os.environ["RAYFLEET_SECRET_REFS"]}
    os.makedirs(os.environ["RAYFLEET_RUN_DIR"], exist_ok=True)
    with open(os.path.join(os.environ["RAYFLEET_RUN_DIR"], f"secret-{rank}.json"), "w") as f:
        json.dump(seen, f)
    print("rank", rank, "has its secret")
""")


def test_each_nodes_script_gets_the_secret_resolved_on_its_node(cluster_env, tmp_path):
    """The launchers start through scripts.recipes.job_entry on each node: the script sees the value, Ray
    (the job's runtime_env, which the node's actor has) only the reference."""
    import hashlib

    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SECRET_SCRIPT)
    recipe = {
        "name": "secret-nodes",
        "entrypoint": "train.py",
        "launcher": "torchrun",
        "env": {"API_KEY": {"secret": "env:TEST_LAUNCHER_KEY"}},
        "resources": {"workers": 2, "cpus_per_worker": 1},
        "storage": str(tmp_path / "runs"),
    }
    (code / "recipe.yaml").write_text(json.dumps(recipe))
    value = "launcher-secret-0123456789"
    result = make_run({**cluster_env, "TEST_LAUNCHER_KEY": value}, code / "recipe.yaml", "secret-nodes")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-3000:]
    assert "[node 1] rank 1 has its secret" in result.stdout
    for rank in (0, 1):
        seen = json.loads((tmp_path / "runs" / "secret-nodes" / f"secret-{rank}.json").read_text())
        assert seen["sha"] == hashlib.sha256(value.encode()).hexdigest()
        assert value not in seen["refs"] and json.loads(seen["refs"])["API_KEY"].startswith("file:")
    assert value not in result.stdout + result.stderr
