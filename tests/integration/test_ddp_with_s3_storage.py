"""The DDP job with its storage in S3, served by a real moto_server process on 127.0.0.1."""

from __future__ import annotations

import io

import boto3
import pytest
import torch

from tests.integration.helpers import run_ddp

pytestmark = pytest.mark.integration


def test_checkpoints_and_metrics_land_in_s3(cluster_env, moto_endpoint, small_dataset):
    s3 = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        region_name="us-east-1",
        aws_access_key_id=cluster_env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=cluster_env["AWS_SECRET_ACCESS_KEY"],
    )
    s3.create_bucket(Bucket="rayfleet-test")
    result = run_ddp(
        cluster_env,
        f"data_dir={small_dataset}",
        "storage=s3://rayfleet-test/runs",
        f"s3_endpoint_url={moto_endpoint}",
        "epochs=2",
        "keep_checkpoints=1",
        "eval_batch_size=600",
        "run_name=s3run",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    listing = s3.list_objects_v2(Bucket="rayfleet-test", Prefix="runs/s3run/")
    keys = {obj["Key"] for obj in listing.get("Contents", [])}
    assert {"runs/s3run/config.yaml", "runs/s3run/metrics.jsonl", "runs/s3run/checkpoint_000002/state.pt"} <= keys
    assert not any(key.startswith("runs/s3run/checkpoint_000001/") for key in keys)  # keep_checkpoints=1
    body = s3.get_object(Bucket="rayfleet-test", Key="runs/s3run/checkpoint_000002/state.pt")["Body"].read()
    state = torch.load(io.BytesIO(body), weights_only=True)
    assert state["epoch"] == 2 and "conv1.weight" in state["model"]
    metrics = s3.get_object(Bucket="rayfleet-test", Key="runs/s3run/metrics.jsonl")["Body"].read().decode()
    assert len(metrics.splitlines()) == 2
    assert "s3://rayfleet-test/runs/s3run/checkpoint_000002" in result.stdout


def test_missing_bucket_fails_with_one_clear_error(cluster_env, moto_endpoint, small_dataset):
    result = run_ddp(
        cluster_env,
        f"data_dir={small_dataset}",
        "storage=s3://no-such-bucket/runs",
        f"s3_endpoint_url={moto_endpoint}",
        "epochs=1",
        "run_name=nobucket",
        timeout=180,
    )
    assert result.returncode == 2  # refused before anything ran (rayfleet.core.errors.EXIT_BAD_INPUT)
    assert "error: storage: cannot write to s3://no-such-bucket/runs/nobucket" in result.stderr
    assert "Traceback" not in result.stderr
