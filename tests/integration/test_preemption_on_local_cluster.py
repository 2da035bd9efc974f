"""Preemption on the real local cluster, through the ECS worker entry point.

A third worker node joins the test cluster the way an ECS worker task does (`rayfleet-node worker`, here
`python -m rayfleet.node.ray_node worker`, with 2 CPUs so Ray packs two of a run's workers onto it). A
DDP run with max_failures=0 starts there; the Spot notice the instance's poller writes makes the entry point
drain its own node with Ray's PREEMPTION reason and a deadline. The run sees
the notice at its next check, saves a checkpoint, waits; at the deadline Ray Train restarts it on the
cluster's two other workers, where it finishes. No failure is spent: with max_failures=0 one would end it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import pytest

from rayfleet.core import stop_request
from rayfleet.core.run_dir import RunDir
from rayfleet.node.drain import SPOT_MARGIN_S
from rayfleet.train.checkpoint import read_state
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking.events import read_scalars
from tests.integration.helpers import DASHBOARD_PORT, REPO
from tests.integration.node_helpers import (
    DEADLINE_S,
    check_the_node,
    entry_point_node,
    wait_for,
    wait_until_idle,
)

pytestmark = pytest.mark.integration
CHECK_EVERY = 2
SIGTERM_REASON = "the task was stopped (SIGTERM)"


def train_workers_under(pid: int) -> int:
    found = 0
    for child in psutil.Process(pid).children(recursive=True):
        try:
            command = child.cmdline()  # empty for a process that is just starting or exiting
        except psutil.Error:
            continue
        found += bool(command) and command[0].startswith("ray::RayTrainWorker")
    return found


def spot_notice(node: subprocess.Popen, scratch: Path) -> None:
    """What the instance's poller writes when IMDS has a Spot notice (infra/modules/cluster/user_data.sh.tftpl):
    the instance goes in DEADLINE_S plus the entry point's margin, so the drain's deadline is DEADLINE_S less
    however long the entry point took to see the file (it looks every 5 s)."""
    when = datetime.fromtimestamp(time.time() + DEADLINE_S + SPOT_MARGIN_S, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    (scratch / "spot-action.json").write_text(json.dumps({"action": "terminate", "time": when}))


def preempted_run(
    cluster_env: dict, scratch: Path, job_command: list[str], started, preempt, moved=None
) -> tuple[str, str, int, int]:
    """Start the node and the run; once `started()` holds, preempt the node; once the node is gone, `moved(job)`
    (the run's own check that it went on elsewhere, when given). (run's output, node's output, node's exit
    code, run's exit code)."""
    log = scratch / "node.log"
    node = entry_point_node(cluster_env, scratch, log)
    job = None
    try:
        wait_for(lambda: "ray start" in log.read_text(), 60, "node start", node)
        # the session's 2 workers and this node's 2, all free, and the node counted by the elastic run's sizing
        wait_until_idle(cluster_env, cpus=4, joined=time.monotonic())
        job = subprocess.Popen(
            job_command, env=cluster_env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        wait_for(lambda: train_workers_under(node.pid) > 0, 240, "run on the entry point's node", job)
        wait_for(started, 300, "progress past the first checkpoint", job)
        preempt(node, scratch)
        node.wait(timeout=DEADLINE_S + 90)
        if moved is not None:
            moved(job)
        out, _ = job.communicate(timeout=600)
        return out, log.read_text(), node.returncode, job.returncode
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        if job is not None and job.poll() is None:
            job.kill()


def check_the_notice(out: str) -> int:
    notice = re.search(r"preemption notice: rank\(s\) \[[\d, ]+\] on a node that goes in (\d+) s", out)
    assert notice, out[-4000:]
    assert 0 < int(notice.group(1)) <= DEADLINE_S
    return int(notice.group(1))


def test_a_ddp_run_on_a_preempted_node_checkpoints_moves_and_finishes(
    cluster_env, small_dataset, tmp_path, monkeypatch
):
    """The Spot notice the instance's poller writes, through the entry point's drain, to an elastic DDP run
    (3 workers, at least 1: two on the entry point's node, one on a session worker) that saves mid-epoch and
    goes on with the 2 workers left, without waiting for a replacement node (issue 30: elastic shrink),
    resuming there at the new world size. The FSDP loop takes the same notice through the same
    RunControl (tests/unit/train/test_run_control.py runs the FSDP loop's shape; its sharded resume from a step
    checkpoint: tests/integration/test_fsdp_on_local_cluster.py); SIGTERM to the entry point: the torchrun test
    below. Also with MLflow (its own file store): the restarted workers log into the same MLflow run (a
    worker killed outright restarts the same way: tests/integration/test_async_checkpoint_on_local_cluster.py,
    and the rehearsal's stopped worker container)."""
    run_dir = RunDir(str(tmp_path), "spot")
    mlflow_uri = (tmp_path / "mlruns").as_uri()
    env = {**cluster_env, "MLFLOW_TRACKING_URI": mlflow_uri, "MLFLOW_ALLOW_FILE_STORE": "true"}
    command = [sys.executable, "-m", "rayfleet.train.ddp", f"data_dir={small_dataset}", f"storage={tmp_path}"]
    # More epochs than it will ever reach: a run that could end before the notice reached it would prove nothing
    # (it did, on an idle machine, in 3 s epochs); once it has trained an epoch on the workers left, the test asks
    # it to stop (the stop request a budget uses, core/stop_request.py), after that epoch's checkpoint.
    command += ["eval_batch_size=600", "epochs=30", "run_name=spot", "max_failures=0", "keep_checkpoints=40"]
    command += ["num_workers=3", "min_workers=1"]  # 2 fit on the session's workers once the node is gone
    command += ["train_subset=1200", "batch_size=64"]  # the steps of the whole set, at half its CPU
    command += [f"preemption_check_steps={CHECK_EVERY}", "progress_every_s=1"]

    def moved(job) -> None:
        wait_for(lambda: any(r["attempt"] == 1 for r in read_rows(run_dir)), 300, "an epoch on the workers left", job)
        stop_request.request(run_dir, "the test saw the run go on elsewhere")

    out, node_out, node_rc, rc = preempted_run(
        env, tmp_path, command, lambda: len(read_rows(run_dir)) >= 1, spot_notice, moved
    )
    assert rc == 0, out[-4000:]
    check_the_node(node_out, node_rc, cluster_env, "Spot interruption notice: terminate at", late_s=15)
    check_the_notice(out)
    saved = re.search(r"checkpoint saved at epoch (\d) step (\d+); waiting for Ray Train to restart", out)
    assert saved, out[-4000:]
    epoch, step = int(saved.group(1)), int(saved.group(2))
    assert step % CHECK_EVERY == 0
    at_notice = read_state(tmp_path / "spot" / f"checkpoint_{epoch - 1:06d}_step_{step:06d}")
    assert at_notice["epoch"] == epoch - 1 and at_notice["position"]["epoch"] == epoch
    assert at_notice["position"]["samples"] > 0 and at_notice["preemptions"] == 1
    assert f"samples into epoch {epoch} (attempt 1)" in out  # resumed mid-epoch, not from the epoch's start
    rows = read_rows(run_dir)
    assert [r["epoch"] for r in rows] == list(range(1, len(rows) + 1)) and len(rows) < 30  # each once, stopped
    before, after = [r for r in rows if r["epoch"] < epoch], [r for r in rows if r["epoch"] >= epoch]
    assert before and all(r["workers"] == 3 and r["attempt"] == 0 for r in before), rows  # every worker it asked for
    assert all(r["workers"] == 2 for r in after), rows  # went on with fewer, no replacement waited for
    assert all(r["preemptions"] == 1 and r["attempt"] == 1 for r in after), after
    assert all(r["steps_redone"] <= CHECK_EVERY for r in after), after  # caught at a check: 0 in practice
    assert rows[-1]["test_accuracy"] > 0.5
    # TensorBoard's curves go on across the attempts: each epoch's accuracy once, at its last step.
    curve = read_scalars(tmp_path / "spot" / "tensorboard")["test/accuracy"]
    assert [acc for _, acc in curve] == pytest.approx([r["test_accuracy"] for r in rows])
    steps = [step for step, _ in curve]
    assert steps == sorted(set(steps)), curve  # one per epoch, going on increasing
    # One MLflow run for the rayfleet run, across the restart: every epoch's accuracy (an epoch that ran
    # twice was logged twice: MLflow keeps history), the last value of each the one in metrics.jsonl;
    # FINISHED, with the last checkpoint as its artifact.
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # this process reads the store too
    client = MlflowClient(tracking_uri=mlflow_uri)
    (run,) = client.search_runs([client.get_experiment_by_name("rayfleet").experiment_id])
    assert run.info.run_id == run_dir.record()["mlflow_run_id"]
    assert run.info.run_name == "spot" and run.data.params["epochs"] == "30"
    assert run.info.status == "FINISHED", out[-3000:]  # the driver's close says why it could not
    logged = sorted(client.get_metric_history(run.info.run_id, "test/accuracy"), key=lambda m: m.timestamp)
    history = {m.step: m.value for m in logged}  # the last value logged for each step
    assert history == {step: pytest.approx(acc) for step, acc in curve}
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == [f"checkpoint_{len(rows):06d}"]


ARGS = ["--steps", "300", "--checkpoint-every", "20", "--pace", "0.05"]  # still running when the notice comes


def submit_launcher_job(env: dict, tmp_path: Path) -> subprocess.Popen:
    """recipes/examples/torch-ddp as a launcher recipe's job on one worker node of 2 CPUs: only an entry point's
    node fits it, never the session's 1-CPU workers. Submitted with Ray's own CLI and the job variables `make
    run` sets (rayfleet/recipes/command.py): `rayfleet run` checks the recipe against the cluster's configured
    1-CPU workers and would refuse it."""
    code = tmp_path / "code"
    shutil.copytree(REPO / "recipes" / "examples" / "torch-ddp", code)
    variables = {"RAYFLEET_RUN_NAME": "spot-torchrun", "RAYFLEET_RUN_DIR": str(tmp_path / "run")}
    variables |= {"RAYFLEET_NUM_WORKERS": "1", "RAYFLEET_CPUS_PER_WORKER": "2", "RAYFLEET_GPUS_PER_WORKER": "0"}
    submit = [str(Path(sys.executable).parent / "ray"), "job", "submit", f"--address=http://127.0.0.1:{DASHBOARD_PORT}"]
    submit += [f"--working-dir={code}", f"--runtime-env-json={json.dumps({'env_vars': variables})}", "--"]
    driver = [sys.executable, "-m", "rayfleet.node.driver.multinode", "--launcher", "torchrun", "--", "train.py", *ARGS]
    return subprocess.Popen(
        submit + driver, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def test_a_torchrun_recipe_saves_on_the_notice_and_resumes_on_a_replacement_node(cluster_env, tmp_path):
    """Proves what the unit tests (tests/unit/node/test_preempt_notice.py) cannot: the run's driver hears of
    Ray's drain of its node through the GCS, the rank on it gets the notice file with the deadline and the
    signal, the attempt ends there and is launched again on the node that replaces it (the drained one takes
    nothing new), and the script resumes from the checkpoint it saved on the notice: no step lost."""
    run_dir = tmp_path / "run"
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    node = entry_point_node(cluster_env, tmp_path / "a", tmp_path / "a" / "node.log")
    replacement = job = None
    try:
        wait_for(lambda: "ray start" in (tmp_path / "a" / "node.log").read_text(), 60, "node start", node)
        wait_until_idle(cluster_env, cpus=4)  # the node has registered with the GCS: Ray counts its 2 CPUs
        job = submit_launcher_job(cluster_env, tmp_path)
        wait_for((run_dir / "checkpoint" / "state.pt").exists, 240, "the first checkpoint", job)
        node.send_signal(signal.SIGTERM)  # Spot takes the instance: ECS stops the task
        replacement = entry_point_node(cluster_env, tmp_path / "b", tmp_path / "b" / "node.log")  # the ASG's
        node.wait(timeout=DEADLINE_S + 90)
        out, _ = job.communicate(timeout=600)
    finally:
        for process in (node, replacement):
            if process is not None and process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        if job is not None and job.poll() is None:
            job.kill()
    assert job.returncode == 0, out[-5000:]
    check_the_node((tmp_path / "a" / "node.log").read_text(), node.returncode, cluster_env, SIGTERM_REASON)
    # The file is written first and the signal sent after: a rank that read the file, saved and exited in
    # between is not there to signal (0). Delivery to every rank: tests/unit/node/test_preempt_notice.py.
    told = re.search(r"preemption notice: node 0 \(Ray node (\w+)\) goes in (\d+) s; told 1 node\(s\): "
                     r"RAYFLEET_PREEMPT_FILE written, SIGUSR1 to [01] rank\(s\) that catch it", out)  # fmt: skip
    assert told and 0 < int(told.group(2)) <= DEADLINE_S, out[-5000:]
    heard = json.loads((run_dir / "notices" / "rank-0-attempt-1.json").read_text())
    assert heard["ray_node_id"].startswith(told.group(1)) and heard["node_rank"] == 0
    assert 0 < heard["deadline_s"] <= DEADLINE_S
    step = heard["step"]
    # the signal rings a moment after the file is written: which the rank heard first is a race it need not care about
    said = f": node 0 goes in {heard['deadline_s']} s; saving at step {step}"
    assert re.search(r"\[node 0\] preemption notice \((signal and file|file|signal)\)" + re.escape(said), out), out
    assert "attempt 1 ended at the preemption notice; launching again on the nodes that are left" in out
    placed = re.findall(r"node 0: \S+ \([\d.]+, Ray node (\w+)\) runs torchrun", out)
    assert len(placed) == 2 and placed[0] == told.group(1) != placed[1], out[-5000:]  # elsewhere the second time
    assert f"[node 0] resuming from the checkpoint of step {step}" in out
    seen = json.loads((run_dir / "ranks" / "rank-0.json").read_text())
    assert seen["RAYFLEET_ATTEMPT"] == "2" and seen["start_step"] == step  # not one step lost
    assert len(seen["losses"]) == 300 - step and "all 1 node(s) finished" in out
