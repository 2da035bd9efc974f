"""Staging a recipe's data (rayfleet/recipes/stage.py): a manifest that names each file's sha256 and size under
a prefix named by their hash, the data folder's own files only (no link out of it), and no state or keys."""

from __future__ import annotations

import hashlib
import json

import boto3
import pytest
from moto import mock_aws

from rayfleet.core.config import ConfigError
from rayfleet.core.staged_data import MANIFEST, parse_manifest
from rayfleet.recipes import stage as stager

BUCKET = "results"


@pytest.fixture
def s3(monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def test_the_manifest_lists_every_file_with_its_sha256_and_size_and_names_the_prefix(s3, tmp_path):
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "a.bin").write_bytes(b"\x00\x01" * 100)
    (data / "b.txt").write_text("b\n")
    url = stager.stage(data, f"s3://{BUCKET}/runs", say=lambda _: None)
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    body = s3.get_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST}")["Body"].read()
    listed = {f["name"]: (f["sha256"], f["bytes"]) for f in json.loads(body)["files"]}
    assert listed == {
        "raw/a.bin": (hashlib.sha256(b"\x00\x01" * 100).hexdigest(), 200),
        "b.txt": (hashlib.sha256(b"b\n").hexdigest(), 2),
    }
    assert [f.name for f in parse_manifest(body, prefix, url)] == ["b.txt", "raw/a.bin"]  # hashes to its name


def test_a_link_out_of_the_data_folder_is_refused_and_one_inside_is_staged(s3, tmp_path):
    data, home = tmp_path / "data", tmp_path / "home"
    data.mkdir()
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("[default]\naws_secret_access_key = x\n")
    (data / "real.txt").write_text("r\n")
    (data / "alias.txt").symlink_to(data / "real.txt")
    assert [name for name, _ in stager.files_of(data)] == ["alias.txt", "real.txt"]
    for link, target in (("aws", home / ".aws"), ("creds.txt", home / ".aws" / "credentials")):
        (data / link).symlink_to(target)
        with pytest.raises(ConfigError, match=rf"data: {link} is a link to .*, outside"):
            stager.stage(data, f"s3://{BUCKET}/runs", say=lambda _: None)
        (data / link).unlink()
    assert not s3.list_objects_v2(Bucket=BUCKET).get("Contents")  # nothing uploaded


def test_state_and_key_files_are_left_out_of_data_and_named(s3, tmp_path):
    data = tmp_path / "data"
    secrets = ["prod.tfvars", ".env", "conf/.pypirc", ".npmrc", "kubeconfig", "home/.kube/config", "id_ed25519"]
    for name in ["train.txt", *secrets]:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("x\n")
    said: list[str] = []
    url = stager.stage(data, f"s3://{BUCKET}/runs", say=said.append)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]]
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    assert sorted(keys) == [f"{prefix}/{MANIFEST}", f"{prefix}/train.txt"]
    assert said[0] == f"[rayfleet] left out of data (they look like state or keys): {', '.join(sorted(secrets))}"
    with pytest.raises(ConfigError, match="looks like state or keys"):
        stager.stage(data / "prod.tfvars", f"s3://{BUCKET}/runs", say=lambda _: None)
