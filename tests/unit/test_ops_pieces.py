"""The AWS verbs' pure pieces: outputs loading, --since, GPU counts, cost, the job command, placement text."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from scripts.aws import MissingOutputs, RayfleetError
from scripts.launch import build_command, explain
from scripts.logs import parse_since
from scripts.prices import gpus_of, hourly_cost
from scripts.status import registered_gpus, render
from scripts.tf_outputs import Outputs

REQUIRED = {
    "region": "eu-west-1", "cluster_name": "c", "private_subnet_ids": ["subnet-1", "subnet-2"],
    "task_security_group_id": "sg-1", "trainer_task_definition": "c-trainer", "head_service_name": "c-head",
    "worker_service_name": "c-worker", "results_bucket": "b", "trainer_log_group": "/rayfleet/c/trainer",
}  # fmt: skip


def test_outputs_read_terraform_json_and_plain_mappings(tmp_path, monkeypatch):
    monkeypatch.delenv("RAYFLEET_RESULTS_BUCKET", raising=False)
    tf = tmp_path / "tf.json"
    tf.write_text(json.dumps({k: {"value": v, "type": "string", "sensitive": False} for k, v in REQUIRED.items()}))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(REQUIRED))
    assert Outputs.load(tf) == Outputs.load(plain)
    out = Outputs.load(tf)
    assert out.private_subnet_ids == ["subnet-1", "subnet-2"] and out.trainer_container_name == "trainer"
    monkeypatch.setenv("RAYFLEET_RESULTS_BUCKET", "other-bucket")
    assert Outputs.load(tf).results_bucket == "other-bucket"  # BUCKET=... on the make line


def test_outputs_name_what_is_missing(tmp_path):
    partial = tmp_path / "p.json"
    partial.write_text(json.dumps({k: v for k, v in REQUIRED.items() if k != "results_bucket"}))
    with pytest.raises(MissingOutputs, match="results_bucket not found"):
        Outputs.load(partial)


def test_since_accepts_durations_and_iso_times():
    now_ms = datetime.now(UTC).timestamp() * 1000
    assert abs(parse_since("10m") - (now_ms - 600_000)) < 5_000
    assert abs(parse_since("2h") - (now_ms - 7_200_000)) < 5_000
    assert parse_since("2026-11-22T10:00") == int(datetime(2026, 11, 22, 10, tzinfo=UTC).timestamp() * 1000)
    assert parse_since(None) is None
    with pytest.raises(RayfleetError, match="use 30s, 10m"):
        parse_since("last week")


def test_gpus_from_the_ecs_agent_or_the_catalog():
    gpu = {"name": "GPU", "type": "STRINGSET", "stringSetValue": ["GPU-a", "GPU-b"]}
    real_ecs = {"registeredResources": [{"name": "CPU", "type": "INTEGER", "integerValue": 4096}, gpu]}
    assert registered_gpus(real_ecs) == 2
    assert registered_gpus({"registeredResources": [{"name": "CPU", "type": "INTEGER"}]}) is None
    assert gpus_of("p5.48xlarge") == 8 and gpus_of("x9.huge") is None


def test_cost_sums_known_types_and_names_unknown_ones():
    cost, unknown = hourly_cost(["g5.xlarge", "g5.xlarge", "m5.xlarge", "x9.huge"])
    assert cost == pytest.approx(2.204) and unknown == ["x9.huge"]


def test_job_command_and_placement_explanations():
    assert build_command("fsdp", ["epochs=1"], "bkt", "r1") == [
        "fsdp",
        "storage=s3://bkt/runs",
        "run_name=r1",
        "epochs=1",
    ]
    assert "free GPU" in explain([{"reason": "RESOURCE:GPU"}])
    assert "custom detail" in explain([{"reason": "OTHER", "detail": "custom detail"}])


def test_status_renders_an_empty_cluster():
    text = render({"cluster": "c", "region": "r", "services": [], "instances": [], "tasks": [], "ray": None,
                   "runs": [], "cost_per_hour_usd": 0.0, "cost_unknown_types": [], "prices_as_of": "x"})  # fmt: skip
    assert "(none running)" in text and "no snapshot yet" in text and "$0.00/hour for 0 instance(s)" in text
