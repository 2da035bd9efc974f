"""A recipe's `data:` reaches jobs that do not run on this machine: staged once per content to the bucket
(rayfleet/recipes/stage.py), copied once per node by the workers (rayfleet/train/data/staged.py). Against a
real moto server: what is uploaded, what a second run uploads (nothing), what a changed file does (a new
prefix), and that a copy is complete or absent."""

from __future__ import annotations

import threading

import boto3
import pytest

from rayfleet.core.config import ConfigError
from rayfleet.core.staged_data import prefix_of
from rayfleet.recipes import stage as stager
from rayfleet.train.data import fashion_mnist, staged
from rayfleet.train.data.synthetic import generate
from tests.integration.helpers import identity_env

pytestmark = pytest.mark.integration
BUCKET = "results"


@pytest.fixture
def s3(moto_endpoint, monkeypatch, tmp_path):
    # IAM enforced: this process stages as the operator (a node's read as the task role is
    # test_iam_roles_on_moto.py's); the test's own client is the all-allowed inspector.
    for key, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        **identity_env(moto_endpoint, "operator"),
        "AWS_DEFAULT_REGION": "us-east-1",
        staged.CACHE_ENV: str(tmp_path / "node-cache"),
    }.items():
        monkeypatch.setenv(key, value)
    inspector = identity_env(moto_endpoint, "inspector")
    client = boto3.client(
        "s3",
        endpoint_url=moto_endpoint,
        aws_access_key_id=inspector["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=inspector["AWS_SECRET_ACCESS_KEY"],
    )
    client.create_bucket(Bucket=BUCKET)
    yield client
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET):
        for item in page.get("Contents", []):
            client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def keys(s3, prefix: str = "staged/") -> list[str]:
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def test_a_folder_is_staged_once_and_a_node_reads_a_complete_copy(s3, tmp_path):
    data = tmp_path / "data"
    generate(data, train=120, test=30, seed=3)
    said: list[str] = []
    url = stager.stage(data, f"s3://{BUCKET}/runs", say=said.append)
    assert url.startswith(f"s3://{BUCKET}/staged/") and len(url.rsplit("/", 1)[-1]) == 16
    assert said[0].startswith(f"[rayfleet] staging data {data} (") and "MB) to s3://" in said[0]
    assert said[-1].startswith("[rayfleet] staged data") and url in said[-1]
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    names = [k.removeprefix(prefix + "/") for k in keys(s3)]
    expected = sorted(p.relative_to(data).as_posix() for p in data.rglob("*") if p.is_file())
    assert names == sorted([*expected, stager.MANIFEST])  # every file, the manifest last (written after them)

    again: list[str] = []
    assert stager.stage(data, f"s3://{BUCKET}/other-runs", say=again.append) == url  # the same bucket
    assert len(again) == 1 and again[0].endswith(f"already staged at {url}")  # nothing uploaded twice

    copy = staged.local_copy(url)
    assert copy == staged.cache_root() / BUCKET / prefix
    for name in expected:
        assert (copy / name).read_bytes() == (data / name).read_bytes()
    assert len(fashion_mnist.load(copy, train=True)) == 120  # what the DDP job loads from it
    assert staged.local_copy(url) == copy  # the second worker on the node: no download
    assert staged.local_copy(str(data)) == data  # a local path is read where it is


def test_a_changed_file_is_a_new_prefix_and_the_old_one_stays(s3, tmp_path):
    data = tmp_path / "text"
    data.mkdir()
    (data / "corpus.txt").write_text("to be or not to be\n")
    first = stager.stage(data, f"s3://{BUCKET}/runs", say=lambda _: None)
    (data / "corpus.txt").write_text("that is the question\n")
    second = stager.stage(data, f"s3://{BUCKET}/runs", say=lambda _: None)
    assert first != second  # a running job never sees its data change under it
    assert staged.local_copy(first).joinpath("corpus.txt").read_text() == "to be or not to be\n"
    assert staged.local_copy(second).joinpath("corpus.txt").read_text() == "that is the question\n"
    one = stager.stage(data / "corpus.txt", f"s3://{BUCKET}/runs", say=lambda _: None)
    assert one.endswith("/corpus.txt")  # a single file: the job reads its key (FSDP's data=s3://...)
    assert s3.get_object(Bucket=BUCKET, Key=one.removeprefix(f"s3://{BUCKET}/"))["Body"].read() == (
        b"that is the question\n"
    )


def test_an_interrupted_upload_is_not_staged_and_workers_refuse_half_a_copy(s3, tmp_path):
    data = tmp_path / "data"
    generate(data, train=60, test=20, seed=4)
    files = stager.files_of(data)
    prefix = prefix_of(stager.listing(files))
    s3.upload_file(str(files[0][1]), BUCKET, f"{prefix}/{files[0][0]}")  # what a Ctrl-C after one file leaves
    with pytest.raises(FileNotFoundError, match="is not a complete staged copy"):
        staged.local_copy(f"s3://{BUCKET}/{prefix}")
    assert not (staged.cache_root() / BUCKET / prefix).exists()  # nothing half-copied left for the next worker
    said: list[str] = []
    assert stager.stage(data, f"s3://{BUCKET}/runs", say=said.append) == f"s3://{BUCKET}/{prefix}"
    assert "staging" in said[0]  # uploaded again, now completely


def test_workers_on_one_node_copy_it_at_the_same_time(s3, tmp_path):
    data = tmp_path / "data"
    generate(data, train=60, test=20, seed=5)
    url = stager.stage(data, f"s3://{BUCKET}/runs", say=lambda _: None)
    copies, errors = [], []

    def worker():
        try:
            copies.append(staged.local_copy(url))
        except Exception as exc:  # the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(copies)) == 1
    assert sorted(p.name for p in copies[0].parent.iterdir()) == [copies[0].name]  # no partial folders left


def test_missing_data_and_local_storage_are_one_line_each(s3, tmp_path):
    with pytest.raises(ConfigError, match=r"data: .*nothing does not exist \(`make data`"):
        stager.stage(tmp_path / "nothing", f"s3://{BUCKET}/runs")
    with pytest.raises(ConfigError, match="staging needs s3:// storage"):
        stager.stage(tmp_path, "/local/runs")
