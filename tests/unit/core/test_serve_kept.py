"""The Serve config `make serve` keeps with the deployment (rayfleet/core/serve_kept.py), on moto's S3."""

from __future__ import annotations

import boto3
from moto import mock_aws

from rayfleet.core import serve_kept as kept

CONFIG = {"applications": [{"name": "rayfleet", "args": {"run_name": "clf"}}, {"name": "other"}]}


def test_kept_until_forgotten_and_nothing_without_it_or_its_bucket():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="rf-results")
        assert kept.kept(s3, "rf-results") is None
        kept.keep(s3, "rf-results", "clf", CONFIG)
        record = kept.kept(s3, "rf-results")
        assert (record["run"], record["config"]) == ("clf", CONFIG) and record["kept_at"] > 0
        assert s3.head_object(Bucket="rf-results", Key="cluster/serve.json")["ContentType"] == "application/json"
        kept.forget(s3, "rf-results")
        assert kept.kept(s3, "rf-results") is None
        assert kept.kept(s3, "rf-gone") is None  # a deployment taken down serves nothing


def test_what_a_head_lacks_is_each_kept_application_it_does_not_run_in_any_state():
    record = {"run": "clf", "config": CONFIG}
    assert kept.missing(record, []) == ["rayfleet", "other"]
    assert kept.missing(record, [{"name": "rayfleet", "status": "DEPLOYING"}]) == ["other"]
    assert kept.missing(record, [{"name": "rayfleet"}, {"name": "other", "status": "UNHEALTHY"}]) == []
    assert kept.missing(None, []) == []
