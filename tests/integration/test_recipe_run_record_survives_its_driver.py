"""A run's record reaches a final state and its log reaches S3 when its driver dies (issue 15, item 13).

The driver here is `rayfleet run --on local` with its run directory in the moto
bucket: the same code (rayfleet/recipes/job.py) the trainer task runs on ECS. It is killed mid-run with
SIGTERM (what ECS sends when the task is stopped) and with SIGKILL (what nothing can catch); a chatty job
shows that the driver's memory does not grow with the job's output. On ECS, the reader side: a RUNNING
run whose trainer task has stopped is LOST.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.integration.helpers import REPO, jobs_api_call, run_record

pytestmark = pytest.mark.integration
PYTHON = str(REPO / ".venv/bin/python")

SLEEPER = textwrap.dedent("""
    import time
    for i in range(5):
        print(f"printed before the kill {i}", flush=True)
    print("ready", flush=True)
    time.sleep(600)
""")


def write_recipe(tmp_path, script: str, storage: str):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "job.py").write_text(script)
    recipe = {
        "name": "killed",
        "code": "code",
        "entrypoint": "job.py",
        "resources": {"workers": 1, "cpus_per_worker": 1},
        "storage": storage,
    }
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(recipe))
    return path


class Driver:
    """The submitter as a subprocess, its output collected by a thread (no pipe fills up)."""

    def __init__(self, env: dict, recipe, run_name: str):
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "rayfleet.cli.main", "run", str(recipe), "--on", "local", "--name", run_name],
            env={**env, "RAYFLEET_LOG_FLUSH_S": "1"},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        self.thread = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True)
        self.thread.start()

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.strip() == text for line in list(self.lines)):  # a line of the job's, not "already"
            assert self.proc.poll() is None, "".join(self.lines)[-3000:]
            assert time.monotonic() < deadline, f"{text!r} never printed:\n" + "".join(self.lines)[-3000:]
            time.sleep(0.2)


@pytest.fixture
def bucket(aws_stack):
    return aws_stack["outputs"]["results_bucket"]


def s3_text(aws_stack, bucket: str, key: str) -> str | None:
    s3 = aws_stack["server"].client("s3")
    try:
        return s3.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
    except s3.exceptions.NoSuchKey:
        return None


def runs_listing(aws_stack, tmp_path) -> dict:
    result = subprocess.run(
        [PYTHON, "-m", "rayfleet.cli.main", "runs", "--json", "--runs-dir", str(tmp_path / "no-local-runs")],
        env=aws_stack["env"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return {r["run"]: r for r in json.loads(result.stdout)}


def uploaded(aws_stack, bucket: str, run: str, timeout: float = 30) -> str:
    """driver.log as it is in S3 once the job's lines have reached it (the spool uploads every second while the
    job runs; on a loaded machine a fixed sleep is not enough)."""
    deadline = time.monotonic() + timeout
    while True:
        log = s3_text(aws_stack, bucket, f"runs/{run}/driver.log") or ""
        if ("printed before the kill 4" in log and "ready" in log) or time.monotonic() > deadline:
            return log
        time.sleep(0.5)


def test_sigterm_stops_the_job_and_the_record_says_so(cluster_env, aws_stack, bucket, tmp_path):
    run = f"term-{time.strftime('%H%M%S')}"
    driver = Driver(cluster_env, write_recipe(tmp_path, SLEEPER, f"s3://{bucket}/runs"), run)
    driver.wait_for("ready")
    assert "printed before the kill 4" in uploaded(aws_stack, bucket, run)  # uploaded while the job runs
    killed_at = time.monotonic()
    driver.proc.send_signal(signal.SIGTERM)  # what ECS sends the trainer when its task is stopped
    code = driver.proc.wait(timeout=60)
    record = json.loads(s3_text(aws_stack, bucket, f"runs/{run}/run.json"))
    print(f"\nSIGTERM to final run.json: {time.monotonic() - killed_at:.1f} s")
    assert code == 128 + signal.SIGTERM, "".join(driver.lines)[-3000:]
    assert record["state"] == "STOPPED" and record["exit_code"] == 143 and "SIGTERM" in record["message"]
    assert record["ended_at"]
    log = s3_text(aws_stack, bucket, f"runs/{run}/driver.log")
    assert "printed before the kill 4" in log and "ready" in log
    assert jobs_api_call(cluster_env, "get_job_status", record["job_id"]) == "STOPPED"  # not left running


def test_sigkill_leaves_the_log_in_s3_and_the_listing_marks_the_run_lost(cluster_env, aws_stack, bucket, tmp_path):
    run = f"kill-{time.strftime('%H%M%S')}"
    driver = Driver(cluster_env, write_recipe(tmp_path, SLEEPER, f"s3://{bucket}/runs"), run)
    driver.wait_for("ready")
    assert "printed before the kill 4" in uploaded(aws_stack, bucket, run)  # uploaded while the job runs
    driver.proc.kill()  # nothing runs after this in the driver
    driver.proc.wait(timeout=30)
    killed_at = time.monotonic()
    log = s3_text(aws_stack, bucket, f"runs/{run}/driver.log") or ""
    assert "printed before the kill 4" in log and "ready" in log  # what was printed is in S3 already
    record = run_record(aws_stack["env"], bucket, run)  # run.json (QUEUED) and the job's admission (an event)
    assert record["state"] == "RUNNING"  # a killed process writes nothing: the reader decides
    try:
        row = runs_listing(aws_stack, tmp_path)[run]
        print(f"\nSIGKILL to LOST in the listing: {time.monotonic() - killed_at:.1f} s")
        assert row["state"] == "LOST"
        record = run_record(aws_stack["env"], bucket, run)  # the listing's finding, an event beside run.json
        assert record["state"] == "LOST" and "is gone" in record["message"] and record["ended_at"]
    finally:
        jobs_api_call(cluster_env, "stop_job", record["job_id"])  # the orphaned job: not on the shared cluster


def test_a_chatty_job_keeps_the_driver_memory_bounded(cluster_env, aws_stack, bucket, tmp_path):
    chatty = "line = 'x' * 99\nfor i in range(500_000):\n    print(line)\nprint('chatty done')\n"  # 50 MB
    quiet = "print('quiet done')\n"
    measure = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    peaks = {}
    for name, script in (("quiet", quiet), ("chatty", chatty)):
        (tmp_path / name).mkdir()
        recipe = write_recipe(tmp_path / name, script, f"s3://{bucket}/runs")
        started = time.monotonic()
        run_name = f"{name}-{time.strftime('%H%M%S')}"
        result = subprocess.run(
            [
                PYTHON,
                "-c",
                measure,
                PYTHON,
                "-m",
                "rayfleet.cli.main",
                "run",
                str(recipe),
                "--on",
                "local",
                "--name",
                run_name,
            ],
            env=cluster_env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        peaks[name] = int(result.stdout.split()[-1]) / 1024  # ru_maxrss: KiB on Linux
        print(f"\n{name} job: driver peak RSS {peaks[name]:.0f} MiB, {time.monotonic() - started:.0f} s")
    runs = [r for r in runs_listing(aws_stack, tmp_path) if r.startswith("chatty-")]
    head = aws_stack["server"].client("s3").head_object(Bucket=bucket, Key=f"runs/{max(runs)}/driver.log")
    assert head["ContentLength"] >= 50_000_000  # all of it reached S3
    assert peaks["chatty"] - peaks["quiet"] < 40, peaks  # not the 50 MB log (or several copies of it)


def test_a_running_run_whose_trainer_task_stopped_is_lost(aws_stack, tmp_path):
    """ECS: the trainer task is gone (stopped, or no longer known to ECS) while run.json says RUNNING."""
    out = aws_stack["outputs"]
    ecs, s3 = aws_stack["server"].client("ecs"), aws_stack["server"].client("s3")
    network = {"subnets": list(out["private_subnet_ids"]), "securityGroups": [out["task_security_group_id"]]}
    started = ecs.run_task(
        cluster=out["cluster_name"],
        taskDefinition=out["trainer_task_definition"],
        startedBy="rayfleet",
        networkConfiguration={"awsvpcConfiguration": network},
    )
    task = started["tasks"][0]["taskArn"]
    records = {
        "ecs-stopped": {"target": "ecs", "state": "RUNNING", "task_arn": task, "job_id": "rayfleet-x"},
        "ecs-unknown": {"target": "ecs", "state": "RUNNING", "task_arn": task.rsplit("/", 1)[0] + "/" + "0" * 32},
        "ecs-running": {"target": "ecs", "state": "RUNNING", "task_arn": task, "job_id": "rayfleet-y"},
    }
    for name in ("ecs-unknown", "ecs-running"):
        s3.put_object(Bucket=out["results_bucket"], Key=f"runs/{name}/run.json", Body=json.dumps(records[name]))
    assert runs_listing(aws_stack, tmp_path)["ecs-running"]["state"] == "RUNNING"  # its task still runs
    ecs.stop_task(cluster=out["cluster_name"], task=task, reason="Task stopped by the test")
    s3.put_object(
        Bucket=out["results_bucket"], Key="runs/ecs-stopped/run.json", Body=json.dumps(records["ecs-stopped"])
    )
    s3.delete_object(Bucket=out["results_bucket"], Key="runs/ecs-running/run.json")
    rows = runs_listing(aws_stack, tmp_path)
    assert rows["ecs-stopped"]["state"] == rows["ecs-unknown"]["state"] == "LOST"
    record = run_record(aws_stack["env"], out["results_bucket"], "ecs-stopped")
    assert record["state"] == "LOST" and "Task stopped by the test" in record["message"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-v", "-s"]))
