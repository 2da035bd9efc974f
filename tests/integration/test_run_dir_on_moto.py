"""The run directory against a real S3 endpoint (moto_server): the same calls as on a local disk."""

from __future__ import annotations

import pytest

from training.core.run_dir import RunDir, list_runs

pytestmark = pytest.mark.integration


def test_s3_run_directory_round_trip(moto, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto.client("s3").create_bucket(Bucket="results")
    run_dir = RunDir("s3://results/runs", "ddp-1", endpoint_url=moto.url)
    assert run_dir.read("run.json") is None and run_dir.record() == {}
    run_dir.update(state="SUBMITTED", task_arn="arn:task/1")
    run_dir.update(state="RUNNING")
    assert run_dir.record() == {"state": "RUNNING", "task_arn": "arn:task/1"}
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "config.json").write_text("{}")
    assert run_dir.upload("export", tmp_path / "export") == "s3://results/runs/ddp-1/export"
    run_dir.write("checkpoint_000002/state.pt", b"x")
    assert run_dir.entries() == ["checkpoint_000002", "export", "run.json"]
    body = moto.client("s3").get_object(Bucket="results", Key="runs/ddp-1/export/config.json")["Body"].read()
    assert body == b"{}"
    RunDir("s3://results/runs", "ddp-0", endpoint_url=moto.url).write("run.json", "{}")
    assert list_runs("s3://results/runs", endpoint_url=moto.url) == ["ddp-0", "ddp-1"]
