"""Elastic workers and two runs at once on the real local test cluster (head + 2 workers x 1 CPU): while a
1-worker recipe run holds one worker, `make train-ddp` with `resources.workers=1-2` is admitted beside it,
starts on the one free worker and grows to two when that run ends, resuming from its checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from tests.integration.helpers import REPO
from tests.integration.run_attempts import RAY_LOST_THE_CODE, check_attempts

pytestmark = pytest.mark.integration

# A fixed-size Ray Train run of one worker (a recipe run, through the queue) that holds one worker's CPU until
# the test lets go. It is Ray Train on purpose: Ray Train's elastic policy sees what other Ray Train (and Ray
# Data) runs hold, through Ray's autoscaling coordinator; a plain actor's CPU it does not see (recipes/README.md).
HOLDER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    def hold(config):
        Path(config["gate"] + ".held").touch()
        while not os.path.exists(config["gate"]):
            time.sleep(0.2)

    ray.init()
    config = {"gate": sys.argv[1]}
    workers = int(os.environ["RAYFLEET_NUM_WORKERS"])
    TorchTrainer(
        hold,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name="holder", storage_path=os.environ["RAYFLEET_STORAGE"]),
    ).fit()
""")


def rows(run) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def test_an_elastic_run_starts_on_the_free_worker_and_grows_when_the_other_frees(cluster_env, tmp_path, small_dataset):
    """What no unit test can show: Ray Train 2.60's elastic policy on a real cluster, fed by the recipe's range
    through RAYFLEET_MIN_WORKERS and the job's min_workers (tests/unit/train/test_job_config.py checks the
    ScalingConfig it builds), admitted by the queue at its minimum beside a running run (two runs at once, each
    placed whole), and the DDP job resuming at the new world size from the checkpoint of the smaller one."""
    gate, storage = tmp_path / "gate", tmp_path / "runs"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "hold.py").write_text(HOLDER)
    recipe = {"name": "holder", "code": "code", "entrypoint": "hold.py", "resources": {"workers": 1}}
    (tmp_path / "holder.yaml").write_text(json.dumps({**recipe, "storage": str(storage)}))
    how = ["--on", "local", "--name", "holder", "--", str(gate)]
    holder = subprocess.Popen(
        [sys.executable, "-m", "rayfleet.cli.main", "run", str(tmp_path / "holder.yaml"), *how],
        env=cluster_env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "gate.held").exists() and holder.poll() is None and time.monotonic() < deadline:
            time.sleep(0.3)
        assert (tmp_path / "gate.held").exists(), holder.communicate(timeout=60)[0][-3000:]
        settings = f"storage={storage} resources.workers=1-2"
        args = "epochs=4 train_subset=512 eval_batch_size=600 elastic_resize_s=2 progress_every_s=0"
        command = ["make", "--no-print-directory", "train-ddp", "ON=local", f"DATA_DIR={small_dataset}"]
        run = subprocess.Popen(
            [*command, f"SET={settings}", f"ARGS={args}", "NAME=elastic"],
            env=cluster_env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 120
        while not rows(storage / "elastic") and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        first = rows(storage / "elastic")
        gate.touch()  # the other worker frees
        output = run.communicate(timeout=600)[0]
    finally:
        gate.touch()
        held = holder.communicate(timeout=120)[0]
        if "run" in locals() and run.poll() is None:
            run.kill()
    assert holder.returncode == 0, held[-3000:]  # two queued runs ran side by side, one worker each
    assert run.returncode == 0, output[-4000:]
    assert first and first[0]["workers"] == 1, (first, output[-3000:])  # it started on the one free worker
    done = rows(storage / "elastic")
    assert done[-1]["workers"] == 2, (done, output[-3000:])  # and grew once the other was free
    assert [r["epoch"] for r in done] == [1, 2, 3, 4]  # no epoch lost or repeated across the resize
    assert "1-2 (elastic) workers" in output
    record = json.loads((storage / "elastic" / "run.json").read_text())
    assert record["state"] == "SUCCEEDED"
    check_attempts(record, [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)  # the resize is Ray Train's, inside it
    holder_record = json.loads((storage / "holder" / "run.json").read_text())
    check_attempts(holder_record, [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)
