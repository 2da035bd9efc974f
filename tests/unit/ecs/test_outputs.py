"""The Terraform outputs file the ECS verbs read: terraform's JSON or a plain mapping, and what is missing named."""

from __future__ import annotations

import json

import pytest

from rayfleet.core.aws import MissingOutputs
from rayfleet.ecs.outputs import Outputs

REQUIRED = {
    "region": "eu-west-1",
    "cluster_name": "c",
    "private_subnet_ids": ["subnet-1", "subnet-2"],
    "task_security_group_id": "sg-1",
    "trainer_task_definition": "c-trainer",
    "head_service_name": "c-head",
    "worker_service_name": "c-worker",
    "results_bucket": "b",
    "trainer_log_group": "/rayfleet/c/trainer",
}


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
