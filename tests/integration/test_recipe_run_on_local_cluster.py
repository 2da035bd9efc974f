"""`rayfleet run` with a user's own Ray Train program, on the real local test cluster, through the Jobs API."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking.events import read_scalars
from tests.fakes.webhook import Receiver
from tests.integration.helpers import DASHBOARD_PORT, REPO, ctrl_c_on_failure, ctrl_c_reaches_it
from tests.integration.run_attempts import RAY_LOST_THE_CODE, check_attempts

pytestmark = pytest.mark.integration

# A plain Ray Train program: nothing from rayfleet, only the RAYFLEET_* variables every run gets.
USER_SCRIPT = textwrap.dedent("""
    import json, os, sys
    import ray.train
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    import helper  # a module next to the script: the whole code directory is shipped

    setup_ran = os.path.exists(os.path.join(os.environ["RAYFLEET_RUN_DIR"], "setup.txt"))  # before this script

    def loop(config):
        import tempfile
        import time
        import torch
        import torch.distributed as dist
        import ray.train
        ctx = ray.train.get_context()
        with open("data/values.txt") as f:  # relative to the code, as at home
            total = sum(int(v) for v in f.read().split())
        print(f"rank {ctx.get_world_rank()} read total {total} in {os.getcwd()}", flush=True)
        x = torch.tensor([float(ctx.get_world_rank() + 1)])
        dist.all_reduce(x)
        metrics = {"sum_of_ranks": x.item(), "world_size": ctx.get_world_size()}
        with tempfile.TemporaryDirectory() as d:
            checkpoint = None
            if ctx.get_world_rank() == 0:
                torch.save({"x": x}, os.path.join(d, "state.pt"))
                checkpoint = ray.train.Checkpoint.from_directory(d)
            ray.train.report(metrics, checkpoint=checkpoint)
        print("reported", flush=True)
        time.sleep(4)  # silent, as a stuck collective would be: the run's stall notice

    workers = int(os.environ["RAYFLEET_NUM_WORKERS"])
    scaling = ScalingConfig(num_workers=workers,
                            resources_per_worker={"CPU": float(os.environ["RAYFLEET_CPUS_PER_WORKER"])})
    result = TorchTrainer(loop, scaling_config=scaling,
                          run_config=RunConfig(name="train", storage_path=os.environ["RAYFLEET_RUN_DIR"])).fit()
    out = {"metric": result.metrics["sum_of_ranks"], "world_size": result.metrics["world_size"],
           "argv": sys.argv[1:], "greeting": os.environ["GREETING"], "api_key_length": len(os.environ["API_KEY"]),
           "helper": helper.VALUE, "setup_ran": setup_ran}
    with open(os.path.join(os.environ["RAYFLEET_RUN_DIR"], "result.json"), "w") as f:
        json.dump(out, f)
    print("user script done:", out["metric"])
""")

FAILING_SCRIPT = textwrap.dedent("""
    import sys, traceback

    def load_batches():
        raise ValueError("shard 7 is corrupt")

    print("about to fail")
    try:
        load_batches()
    except ValueError:
        traceback.print_exc()
        sys.exit(76)
""")

SECRET = "s3cr3t-value-never-stored-0123456789"


def write_recipe(directory: Path, script: str, storage: Path, **extra) -> Path:
    code = directory / "code"
    code.mkdir()
    (code / "train.py").write_text(script)
    (code / "helper.py").write_text("VALUE = 41 + 1\n")
    (code / "data").mkdir()
    (code / "data" / "values.txt").write_text("1 2 3 36\n")
    (code / "big.ckpt").write_bytes(b"x" * 1024)  # excluded by the recipe
    recipe = {
        "name": "user-job",
        "code": "code",
        "entrypoint": "train.py",
        "args": ["--run-dir", "${RAYFLEET_RUN_DIR}"],
        "env": {"GREETING": "hello from ${RAYFLEET_RUN_NAME}", "API_KEY": {"secret": "env:TEST_API_KEY"}},
        "resources": {"workers": 2, "cpus_per_worker": 1},
        "storage": str(storage),
        "setup": 'echo ready > "$RAYFLEET_RUN_DIR/setup.txt"',
        "exclude": ["*.ckpt"],
        **extra,
    }
    path = directory / "recipe.yaml"
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return path


def make_run(env: dict, recipe: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", "run", f"RECIPE={recipe}", "ON=local", *args],
        env={**env, "TEST_API_KEY": SECRET},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def make_train(env: dict, target: str, data_dir: Path, settings: str, args: str, run: str):
    """`make train-ddp` / `make train-fsdp` on the local test cluster, as a user types it (this checkout's code
    first on the path: a virtualenv copied from another checkout, its editable install and its `rayfleet`
    script's interpreter, would otherwise run that checkout's submitter)."""
    return subprocess.run(
        [
            "make",
            "--no-print-directory",
            target,
            "ON=local",
            f"DATA_DIR={data_dir}",
            f"SET={settings}",
            f"ARGS={args}",
            f"NAME={run}",
        ],
        env={**env, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def only_run(storage: Path) -> Path:
    runs = [p for p in storage.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_user_train_script_runs_from_a_recipe(cluster_env, tmp_path):
    """One Ray Train program through `rayfleet run` proves: the whole code directory ships (helper module, a data
    file opened relative to the code from each Ray Train worker, excludes honoured), ARGS/env/secret/setup
    reach the script, the all-reduce spans both workers, the run record/zip/log/listing/logs verb, and the stall
    notice and start/end messages to the webhook. (It merges three earlier runs: the relative-files and stall
    tests each ran a job of their own.)"""
    storage = tmp_path / "runs"
    hook = Receiver()
    try:
        recipe = write_recipe(
            tmp_path,
            USER_SCRIPT,
            storage,
            notify={"webhook": {"secret": "env:TEST_HOOK"}, "stall_after_s": 2},
        )
        result = make_run({**cluster_env, "TEST_HOOK": hook.url}, recipe, "ARGS=--extra 7", "NAME=user-job-ok")
    finally:
        hook.close()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "user script done: 3.0" in result.stdout  # followed live: the job's own output
    for rank in (0, 1):  # each Ray Train worker, in the unpacked code (Ray's working_dir), not a run directory
        line = result.stdout.split(f"rank {rank} read total 42 in ", 1)[1].splitlines()[0]
        assert "/runtime_resources/working_dir_files/_ray_pkg_" in line, line
    texts = hook.texts()
    assert texts[0] == "rayfleet: run user-job-ok started" and texts[-1] == "rayfleet: run user-job-ok succeeded"
    assert [t for t in texts if t.startswith("rayfleet: run user-job-ok stalled\nno output for ")], texts
    run = only_run(storage)
    assert run.name == "user-job-ok"
    assert hook.url not in (run / "run.json").read_text() + (run / "driver.log").read_text()  # a secret
    out = json.loads((run / "result.json").read_text())
    assert out["metric"] == 3.0 and out["world_size"] == 2  # ranks 1 + 2, all-reduced over 2 workers
    assert out["argv"] == ["--run-dir", str(run), "--extra", "7"]
    assert out["greeting"] == "hello from user-job-ok"
    assert out["api_key_length"] == len(SECRET) and out["helper"] == 42 and out["setup_ran"]
    # Ray Train's own checkpoint, with the reported metric, is in the run directory too
    assert list(run.glob("train/checkpoint_*/state.pt")), sorted(str(p) for p in run.rglob("*"))
    record = json.loads((run / "run.json").read_text())
    assert record["state"] == "SUCCEEDED" and record["exit_code"] == 0 and record["target"] == "local"
    check_attempts(record, [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)
    assert record["job_id"].startswith("rayfleet-user-job-ok-")
    code_zip = run / f"code-{record['code_sha256'][:12]}.zip"
    import hashlib
    import zipfile

    assert hashlib.sha256(code_zip.read_bytes()).hexdigest() == record["code_sha256"]
    names = {n for n in zipfile.ZipFile(code_zip).namelist() if not n.endswith("/")}
    assert names == {"data/values.txt", "helper.py", "train.py"}  # big.ckpt excluded
    assert "user script done" in (run / "driver.log").read_text()
    resolved = (run / "recipe.yaml").read_text()
    assert "env:TEST_API_KEY" in resolved
    for name in ("run.json", "recipe.yaml", "driver.log"):
        assert SECRET not in (run / name).read_text(), f"secret value in {name}"
    assert SECRET not in result.stdout + result.stderr

    listing = subprocess.run(
        [str(REPO / ".venv/bin/python"), "-m", "rayfleet.cli.main", "runs", "--runs-dir", str(storage), "--json"],
        env={**cluster_env, "RAYFLEET_OUTPUTS": str(tmp_path / "none.json")},
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(listing.stdout)
    assert [(r["run"], r["where"], r["state"]) for r in rows] == [("user-job-ok", "local", "SUCCEEDED")]
    assert rows[0]["duration_s"] > 0 and rows[0]["results"] == str(run)
    # its goodput ledger: a user's script times no phases of its own, and the ledger says so; the run's whole
    # time is still there, priced (here: $0), none of it taken for compute
    ledger = rows[0]["ledger"]
    assert ledger == record["ledger"] and ledger["job_phases"] is False and ledger["goodput"] == 0.0
    assert sum(r["seconds"] for r in ledger["phases"]) == pytest.approx(ledger["wall_s"], abs=0.01)
    assert "[rayfleet]   (the job reported no phases of its own: only the built-in ddp and fsdp jobs" in result.stdout
    logs = subprocess.run(
        [str(REPO / ".venv/bin/python"), "-m", "rayfleet.cli.main", "logs", "--run", "user-job-ok"],
        env={**cluster_env, "PYTHONPATH": str(REPO)},
        cwd=storage.parent,
        capture_output=True,
        text=True,
    )
    assert logs.returncode == 0 and "user script done" in logs.stdout, logs.stderr


def test_failing_script_fails_make_run_with_its_traceback_and_its_exit_code(cluster_env, tmp_path):
    """A script that prints its traceback and exits 76, which the recipe's retries do not name: rayfleet run fails
    at once (make's `Error 76`: the verb's exit code is the script's), the traceback tail on stderr, the
    record FAILED with exit 76 and one attempt. (It merges the former exit-code and non-retried runs.)"""
    storage = tmp_path / "runs"
    recipe = write_recipe(
        tmp_path,
        FAILING_SCRIPT,
        storage,
        resources={"workers": 1, "cpus_per_worker": 1},
        retries={"count": 2, "exit_codes": [75]},
    )
    result = make_run(cluster_env, recipe)
    assert result.returncode != 0 and "Error 76" in result.stderr, result.stderr[-3000:]  # make exits 2
    assert "retrying" not in result.stdout
    assert "ValueError: shard 7 is corrupt" in result.stderr  # the traceback tail, on stderr
    assert "in load_batches" in result.stderr
    record = json.loads((only_run(storage) / "run.json").read_text())
    assert record["state"] == "FAILED" and record["exit_code"] == 76
    check_attempts(record, [("FAILED", 76)], allowing=RAY_LOST_THE_CODE)  # not retried
    assert "shard 7 is corrupt" in (only_run(storage) / "driver.log").read_text()


# A script that keeps its place in its run directory (as a user's script keeps its checkpoint there) and
# fails once, at step 3 of its first attempt, with the exit code its first argument names.
RETRIED_SCRIPT = """
import os, pathlib, sys
import tabulate  # the recipe's pinned pip package
print("tabulate", tabulate.__version__, flush=True)
mark = pathlib.Path(os.environ["RAYFLEET_RUN_DIR"]) / "progress.txt"
done = int(mark.read_text()) if mark.exists() else 0
print(f"starting at step {done + 1}", flush=True)
for step in range(done + 1, 7):
    mark.write_text(str(step))
    if step == 3 and done == 0:
        sys.exit(int(sys.argv[-1]))
print("finished at step 6", flush=True)
"""


def test_a_failure_the_retries_name_is_resubmitted_and_resumes(cluster_env, tmp_path):
    """Exit 75, named by the recipe's retries: resubmitted under the same run name, resumed at step 4. The
    recipe's pinned pip package is installed for the job only, in both attempts. (The unnamed code's case is
    test_failing_script_fails_make_run_with_its_traceback_and_its_exit_code; the pip check had a run of its
    own. Pip with a two-node Ray Train program fails on a one-host local cluster, whose nodes share Ray's
    runtime_resources directory, so it is checked on this one-node script.)"""
    storage = tmp_path / "runs"
    recipe = write_recipe(
        tmp_path,
        RETRIED_SCRIPT,
        storage,
        args=["75"],
        resources={"workers": 1, "cpus_per_worker": 1},
        retries={"count": 2, "exit_codes": [75]},
        pip=["tabulate==0.10.0"],
    )
    result = make_run(cluster_env, recipe, timeout=300)
    attempts = json.loads((only_run(storage) / "run.json").read_text())["attempts"]
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "attempt 1 ended with exit 75; retrying (attempt 2 of 3) under the same run name" in result.stdout
    assert "starting at step 4" in result.stdout and "finished at step 6" in result.stdout  # resumed
    assert [(a["attempt"], a["state"], a["exit_code"]) for a in attempts] == [(1, "FAILED", 75), (2, "SUCCEEDED", 0)]
    assert attempts[0]["job_id"] != attempts[1]["job_id"]
    assert result.stdout.count("tabulate 0.10.0") == 2  # the recipe's pip package, in each attempt
    isolated = subprocess.run([str(REPO / ".venv/bin/python"), "-c", "import tabulate"], capture_output=True)
    assert isolated.returncode != 0  # Ray's per-job environment, not the cluster's own


def test_ctrl_c_stops_the_job_and_keeps_its_record(cluster_env, tmp_path):
    import signal
    import time

    storage = tmp_path / "runs"
    script = "import time\nprint('started', flush=True)\ntime.sleep(600)\n"
    recipe = write_recipe(tmp_path, script, storage, resources={"workers": 1, "cpus_per_worker": 1})
    proc = subprocess.Popen(
        [str(REPO / ".venv/bin/python"), "-m", "rayfleet.cli.main", "run", str(recipe), "--on", "local"],
        env={**cluster_env, "TEST_API_KEY": SECRET},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=ctrl_c_reaches_it,
    )
    with ctrl_c_on_failure(proc):
        deadline = time.monotonic() + 300  # the rehearsal may run beside this cluster
        for line in proc.stdout:
            if line.strip() == "started":
                break
            assert time.monotonic() < deadline, "the job never started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    record = json.loads((only_run(storage) / "run.json").read_text())
    assert record["state"] == "STOPPED" and record["exit_code"] == 130
    check_attempts(record, [("STOPPED", 130)], allowing=RAY_LOST_THE_CODE)
    assert "started" in (only_run(storage) / "driver.log").read_text()
    import urllib.request

    request = urllib.request.Request(f"http://127.0.0.1:{DASHBOARD_PORT}/api/jobs/{record['job_id']}")
    request.add_header("Authorization", f"Bearer {Path(cluster_env['RAY_AUTH_TOKEN_PATH']).read_text().strip()}")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["status"] == "STOPPED"  # the job itself, not only the follower


def test_a_budget_stops_the_run_cleanly_after_a_checkpoint_and_the_name_submitted_again_resumes(
    cluster_env, tmp_path, small_dataset
):
    """max_hours of 36 s on a 20-epoch DDP run: the follower asks, the job checkpoints and ends, the record
    says STOPPED by budget, with the run's cost ($0 here: a local run holds this machine). Started with
    `make train-ddp`, it is also the built-in DDP recipe's end-to-end run. Then the same `make train-ddp`
    under the ended run's name, no budget, one epoch more: what only this run proves, on Ray itself, is the
    DDP job resubmitted by name resuming from its checkpoint through the Jobs API: the raised `epochs`, the
    next epoch only (attempt 1, no step redone), the old stop request cleared, the record's second submission
    with its one attempt, TensorBoard's steps going on."""
    storage = tmp_path / "runs"
    # 36 s from submission: a loaded 2-core CI host may take 8 s to set the job up and admit it, and 20 s more
    # when Ray loses the job's code package under it (its working_dir cache) and rayfleet submits it once more
    settings = f"storage={storage} max_hours=0.01"
    args = "eval_batch_size=600 train_subset=1200 batch_size=64"  # epochs of half the CPU: it stops sooner
    result = make_train(cluster_env, "train-ddp", small_dataset, settings, f"epochs=20 {args}", "budgeted")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run = only_run(storage)
    record = json.loads((run / "run.json").read_text())
    # `make train-ddp` is the built-in recipe's shortcut (its forwarding: tests/unit/test_make_shortcuts.py)
    assert record["recipe"] == "ddp" and record["recipe_file"].endswith("recipes/ddp.yaml")
    assert (run / "config.yaml").is_file() and (run / "recipe.yaml").is_file()
    assert record["state"] == "STOPPED" and record["message"].startswith("stopped by budget: max_hours 0.01")
    assert record["held"] == {"where": "local", "instances": [], "usd_per_hour": 0.0} and record["cost_usd"] == 0.0
    assert record["submission"] == 1
    assert record["data"] == "SYNTHETIC FashionMNIST-format data"  # what it trained on, from rank 0
    # the run's goodput ledger from its submission: the queue's wait, and the phases the DDP job's rank 0 timed
    seconds = {r["phase"]: r["seconds"] for r in record["ledger"]["phases"]}
    assert "queue" in seconds and record["ledger"]["job_phases"] is True
    assert all(seconds.get(p, 0) > 0 for p in ("run_start", "compute", "evaluation", "checkpoint")), seconds
    last = result.stdout.rstrip().splitlines()[-2:]  # the ledger ends the output, then the run's dashboard page
    assert last[0].startswith("[rayfleet]   goodput (compute / total): ")
    assert last[1] == "[rayfleet]   its job in Ray's dashboard: rayfleet dashboard --run budgeted"
    # no one group of the suite's cluster (a, b: one 1-CPU node each) holds its 2 workers: they span them
    assert "[rayfleet] no one worker group holds its 2 node(s): its workers go to any node of a " in result.stdout
    check_attempts(record, [("STOPPED", record["exit_code"])], allowing=RAY_LOST_THE_CODE)
    epochs = [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (
        1 <= len(epochs) < 20
        and sorted(p.name for p in run.glob("checkpoint_0*"))[-1] == f"checkpoint_{epochs[-1]:06d}"
    )
    assert f"stopping after epoch {epochs[-1]} (its checkpoint is saved): stopped by budget" in result.stdout
    assert "[rayfleet] run budgeted stopped (its checkpoint is saved)" in result.stdout

    last = epochs[-1]
    again = make_train(
        cluster_env, "train-ddp", small_dataset, f"storage={storage}", f"epochs={last + 1} {args}", "budgeted"
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming budgeted from the checkpoint of epoch {last} (attempt 1)" in again.stdout
    assert "stopped by budget" not in again.stdout  # the first submission's stop request did not stop this one
    rows = read_rows(RunDir(str(storage), "budgeted"))
    assert [(r["epoch"], r["attempt"]) for r in rows] == [(e, 0) for e in epochs] + [(last + 1, 1)]
    assert rows[-1]["steps_redone"] == 0 and "epochs: " + str(last + 1) in (run / "config.yaml").read_text()
    assert rows[-1]["resumed_from"] == f"checkpoint_{last:06d}"  # the newest complete checkpoint it kept
    record = json.loads((run / "run.json").read_text())
    assert record["resumed_from"] == {"attempt": 1, "checkpoint": f"checkpoint_{last:06d}"}, record
    assert record["state"] == "SUCCEEDED" and record["submission"] == 2
    check_attempts(record, [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)
    assert record["attempts"][0]["reason"].startswith("submission 2 of the run's name"), record["attempts"]
    # TensorBoard, read with its own reader: one accuracy per epoch at its last step (10 steps an epoch), going
    # on from the first submission's steps
    curve = read_scalars(run / "tensorboard")["test/accuracy"]
    assert [step for step, _ in curve] == [10 * e for e in range(1, last + 2)], curve
    assert [acc for _, acc in curve] == pytest.approx([r["test_accuracy"] for r in rows])
