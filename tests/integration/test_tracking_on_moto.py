"""Tracking against a real moto_server: event files reach S3 and the laptop verbs read them back (`make
tensorboard` syncs and serves them, TensorBoard's own HTTP API is asked; `make plot` draws from S3); rank 0's
scalars reach CloudWatch with the run's name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.train.tracking import cloudwatch
from rayfleet.train.tracking.events import EventFiles, read_scalars
from rayfleet.train.tracking.scalars import Scalars, Target
from tests.integration.helpers import REPO, free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def s3_run(moto, monkeypatch, tmp_path, rendered_bucket):
    """A run's metrics and event files written by this process as the job (the task role); returns the run
    directory and the env of the verbs that read them on the laptop (the operator)."""
    base = {"AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": moto.url}
    env = {**os.environ, **base, **moto.as_identity("operator"), "RAYFLEET_STATE_DIR": str(tmp_path / "state")}
    for key, value in {**base, **moto.as_identity("task")}.items():
        monkeypatch.setenv(key, value)
    moto.inspector("s3").create_bucket(Bucket=rendered_bucket)
    run_dir = RunDir(f"s3://{rendered_bucket}/runs", "s3run")
    rows = [
        {"epoch": e, "train_loss": 1 / e, "test_loss": 1 / e, "test_accuracy": e / 4, "images_per_s": 5.0}
        for e in (1, 2)
    ]
    run_dir.write("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    events = EventFiles(run_dir, purge_step=1)
    for step in (10, 20):
        events.scalars(step, {"test/accuracy": step / 40})
        events.flush()  # each flush uploads the folder: S3 has no append
    events.close()
    return run_dir, env


def test_event_files_land_in_s3_and_make_tensorboard_serves_them(s3_run, moto, tmp_path, rendered_bucket):
    _, env = s3_run
    keys = [o["Key"] for o in moto.inspector("s3").list_objects_v2(Bucket=rendered_bucket)["Contents"]]
    assert [k for k in keys if "/tensorboard/events.out.tfevents." in k]
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rayfleet.cli.main",
            "runs",
            "tensorboard",
            "--run",
            "s3run",
            "--runs-dir",
            f"s3://{rendered_bucket}/runs",
            "--port",
            str(port),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, tags = time.monotonic() + 90, None
        while tags is None:
            assert server.poll() is None, server.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "TensorBoard did not answer within 90 s"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/plugin/scalars/tags", timeout=2) as r:
                    tags = json.load(r) or None
            except OSError:
                time.sleep(0.5)
        assert "test/accuracy" in tags["s3run/."]  # logdir_spec names a run <name>/<folder below it>
        url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run=s3run/.&tag=test/accuracy"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert [(step, value) for _, step, value in json.load(r)] == [(10, 0.25), (20, 0.5)]
    finally:
        server.terminate()
        out = server.communicate(timeout=30)[0]
    synced = tmp_path / "state" / "tensorboard" / "s3run" / "tensorboard"
    assert f"syncing s3://{rendered_bucket}/runs/s3run/tensorboard -> {synced.parent}" in out
    assert len(list(synced.iterdir())) == 1


def test_make_plot_draws_a_run_in_s3(s3_run, tmp_path, rendered_bucket):
    _, env = s3_run
    out = tmp_path / "s3run.png"
    runs = f"s3://{rendered_bucket}/runs"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "rayfleet.cli.main",
            "runs",
            "plot",
            "--run",
            "s3run",
            "--runs-dir",
            runs,
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert out.read_bytes()[:4] == b"\x89PNG" and "s3run: 2 points" in result.stdout


def test_rank_zeros_scalars_reach_cloudwatch_with_the_run_name(moto, monkeypatch, tmp_path):
    """What rank 0 does on ECS (as the task role), against moto's CloudWatch: the driver's Target names the
    destination."""
    for key, value in {**moto.as_identity("task"), "AWS_ENDPOINT_URL": moto.url}.items():
        monkeypatch.setenv(key, value)
    target = Target(tensorboard=False, cloudwatch=cloudwatch.Destination("rayfleet", "prod", "us-east-1"))
    scalars = Scalars(RunDir(str(tmp_path), "ddp-7"), target, purge_step=None)
    scalars.log(10, {"train/loss": 0.9, "throughput/images_per_s": 300.0, "test/accuracy": 0.5})
    scalars.log(20, {"train/loss": 0.6, "throughput/images_per_s": 330.0})
    scalars.close()
    client = moto.inspector("cloudwatch")
    listed = client.list_metrics(Namespace="rayfleet")["Metrics"]
    assert {m["MetricName"] for m in listed} == {"TrainingLoss", "TrainingThroughput"}
    assert all(
        sorted((d["Name"], d["Value"]) for d in m["Dimensions"]) == [("ClusterName", "prod"), ("RunName", "ddp-7")]
        for m in listed
    )
    stats = client.get_metric_statistics(
        Namespace="rayfleet",
        MetricName="TrainingLoss",
        Dimensions=[{"Name": "ClusterName", "Value": "prod"}, {"Name": "RunName", "Value": "ddp-7"}],
        StartTime=datetime.now(UTC) - timedelta(minutes=5),
        EndTime=datetime.now(UTC) + timedelta(minutes=5),
        Period=600,
        Statistics=["Minimum", "Maximum", "SampleCount"],
    )["Datapoints"]
    assert [(d["Minimum"], d["Maximum"], d["SampleCount"]) for d in stats] == [(0.6, 0.9, 2.0)]


def test_a_cloudwatch_that_refuses_costs_one_warning_and_tensorboard_goes_on(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "t")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "t")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    target = Target(tensorboard=True, cloudwatch=cloudwatch.Destination("rayfleet", "prod", "us-east-1"))
    scalars = Scalars(RunDir(str(tmp_path), "r"), target, purge_step=None)
    scalars.log(1, {"train/loss": 1.0})
    scalars.log(2, {"train/loss": 0.5})
    scalars.close()
    assert capsys.readouterr().err.count("warning: CloudWatch stopped taking metrics") == 1
    assert [s for s, _ in read_scalars(tmp_path / "r" / "tensorboard")["train/loss"]] == [1, 2]
