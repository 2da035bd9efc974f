"""A node's copy of staged data (rayfleet/train/data/staged.py) is checked against the manifest in S3 every time,
because every job on the node can write the cache: a planted or altered copy is discarded and downloaded again,
a manifest that does not hash to its prefix's name is refused, and no name in it lands outside the copy.
The staging side (rayfleet/recipes/stage.py) runs as the deployer against moto in this process."""

from __future__ import annotations

import json
import os

import boto3
import pytest
from moto import mock_aws

from rayfleet.core.run_dir import UnsafeKey
from rayfleet.core.staged_data import MANIFEST, StagedDataError, StagedFile, manifest_body, prefix_of
from rayfleet.recipes import stage as stager
from rayfleet.train.data import staged
from rayfleet.train.data.text import read_text

BUCKET = "results"
SHA_OF_NOTHING = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.fixture
def s3(monkeypatch, tmp_path):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        staged.CACHE_ENV: str(tmp_path / "node-cache"),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _data(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "train.txt").write_text("the real training text\n")
    (data / "sub" / "labels.txt").write_text("1 2 3\n")
    (data / "empty.txt").write_bytes(b"")
    return data


def test_a_copy_a_job_altered_or_added_to_is_discarded_and_downloaded_again(s3, tmp_path):
    url = stager.stage(_data(tmp_path), f"s3://{BUCKET}/runs", say=lambda _: None)
    copy = staged.local_copy(url)
    assert (copy / "train.txt").read_text() == "the real training text\n"
    (copy / "train.txt").write_text("poisoned\n")  # what a job on the node can do once the copy exists
    assert (staged.local_copy(url) / "train.txt").read_text() == "the real training text\n"
    (copy / "extra.pt").write_bytes(b"planted")
    assert not (staged.local_copy(url) / "extra.pt").exists()
    (copy / "sub" / "labels.txt").unlink()
    (copy / "sub" / "labels.txt").symlink_to(tmp_path / "elsewhere")
    assert not (staged.local_copy(url) / "sub" / "labels.txt").is_symlink()
    (copy / "empty.txt").unlink()
    os.mkfifo(copy / "empty.txt")  # of the right size (0), but reading it to check it would hang the worker
    assert (staged.local_copy(url) / "empty.txt").is_file()
    assert sorted(p.name for p in copy.parent.iterdir()) == [copy.name]  # nothing discarded left behind


def test_a_copy_planted_before_the_first_download_with_its_own_manifest_is_not_trusted(s3, tmp_path):
    url = stager.stage(_data(tmp_path), f"s3://{BUCKET}/runs", say=lambda _: None)
    planted = staged.cache_root() / url.removeprefix("s3://")
    (planted / "sub").mkdir(parents=True)
    (planted / "train.txt").write_text("poisoned\n")
    (planted / "sub" / "labels.txt").write_text("9 9 9\n")
    (planted / "empty.txt").write_text("")
    (planted / MANIFEST).write_text(json.dumps({"files": ["empty.txt", "train.txt", "sub/labels.txt"]}))
    copy = staged.local_copy(url)
    assert (copy / "train.txt").read_text() == "the real training text\n"
    assert (copy / "sub" / "labels.txt").read_text() == "1 2 3\n"


def test_a_manifest_that_does_not_hash_to_its_prefix_is_refused(s3, tmp_path):
    url = stager.stage(_data(tmp_path), f"s3://{BUCKET}/runs", say=lambda _: None)
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    other = [StagedFile("train.txt", SHA_OF_NOTHING, 0)]  # well formed, but not what the name says
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST}", Body=manifest_body(other, "forged"))
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/train.txt", Body=b"")
    with pytest.raises(StagedDataError, match="does not hash to the prefix's name"):
        staged.local_copy(url)
    assert not (staged.cache_root() / BUCKET / prefix).exists()


def test_an_object_that_differs_from_its_manifest_is_refused_and_nothing_is_left(s3, tmp_path):
    url = stager.stage(_data(tmp_path), f"s3://{BUCKET}/runs", say=lambda _: None)
    prefix = url.removeprefix(f"s3://{BUCKET}/")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/train.txt", Body=b"changed in the bucket\n")
    with pytest.raises(StagedDataError, match="does not match"):
        staged.local_copy(url)
    assert not any((staged.cache_root() / BUCKET / "staged").iterdir())  # no partial copy either


def test_a_key_that_would_leave_the_copy_is_refused(s3, tmp_path):
    """R7: the same inside() check as run directories: `..` in a staged name never writes outside the copy."""
    escape = [StagedFile("../../escaped.txt", SHA_OF_NOTHING, 0)]
    prefix = prefix_of(escape)
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/../../escaped.txt", Body=b"")
    s3.put_object(Bucket=BUCKET, Key=f"{prefix}/{MANIFEST}", Body=manifest_body(escape, "forged"))
    with pytest.raises(UnsafeKey, match="would leave"):
        staged.local_copy(f"s3://{BUCKET}/{prefix}")
    assert not list(staged.cache_root().rglob("escaped.txt"))


def test_a_malformed_staged_prefix_is_refused_and_local_paths_are_read_where_they_are(s3, tmp_path):
    for source in (f"s3://{BUCKET}/staged/../../etc", "s3://../staged/0123456789abcdef", f"s3://{BUCKET}/staged/x"):
        with pytest.raises((StagedDataError, UnsafeKey)):
            staged.local_copy(source)
    assert staged.local_copy(str(tmp_path)) == tmp_path


def test_the_users_own_prefix_is_copied_for_this_process_alone_and_never_leaves_it(s3, tmp_path, monkeypatch):
    """`data_dir=s3://bucket/data/fashion` (a set the operator keeps under data/, not staged by a recipe): read
    as the user's own, into a folder of this process's own, never the node's shared cache; a key that would
    leave the copy is refused."""
    monkeypatch.setenv(staged.CACHE_ENV, str(tmp_path / "cache"))
    s3.put_object(Bucket=BUCKET, Key="data/fashion/FashionMNIST/raw/t10k-labels-idx1-ubyte", Body=b"labels")
    s3.put_object(Bucket=BUCKET, Key="data/fashion/README", Body=b"mine")
    first = staged.local_copy(f"s3://{BUCKET}/data/fashion")
    second = staged.local_copy(f"s3://{BUCKET}/data/fashion/")
    assert first != second and not (tmp_path / "cache").exists()
    assert (first / "FashionMNIST/raw/t10k-labels-idx1-ubyte").read_bytes() == b"labels"
    assert (first / "README").read_bytes() == b"mine" and (first.stat().st_mode & 0o077) == 0
    with pytest.raises(FileNotFoundError, match="nothing under"):
        staged.local_copy(f"s3://{BUCKET}/data/none")
    s3.put_object(Bucket=BUCKET, Key="data/evil/../../../escaped", Body=b"x")
    with pytest.raises(UnsafeKey):
        staged.local_copy(f"s3://{BUCKET}/data/evil")


def test_a_staged_text_file_is_read_only_as_its_manifest_says(s3, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be\n")
    url = stager.stage(corpus, f"s3://{BUCKET}/runs", say=lambda _: None)
    assert read_text(url) == "to be or not to be\n"
    s3.put_object(Bucket=BUCKET, Key=url.removeprefix(f"s3://{BUCKET}/"), Body=b"poisoned\n")
    with pytest.raises(StagedDataError, match="does not match its staged manifest"):
        read_text(url)
    s3.put_object(Bucket=BUCKET, Key="mine/corpus.txt", Body=b"a user's own object\n")
    assert read_text(f"s3://{BUCKET}/mine/corpus.txt") == "a user's own object\n"  # not staged: read as is
    s3.put_object(Bucket=BUCKET, Key="mine/latin1.txt", Body=b"caf\xe9\n")
    with pytest.raises(ValueError, match=r"is not UTF-8 text \(byte 3: 0xe9\)"):
        read_text(f"s3://{BUCKET}/mine/latin1.txt")


@pytest.mark.parametrize("plant", ["link", "file"])
def test_a_cache_a_job_broke_for_later_runs_gives_them_a_checked_copy_of_their_own(s3, tmp_path, plant):
    """A job on the node plants its bucket's cache folder as a link out of the cache, or as a plain file: every
    later run's data load would fail there; each gets a checked copy of its own instead."""
    url = stager.stage(_data(tmp_path), f"s3://{BUCKET}/runs", say=lambda _: None)
    staged.cache_root().mkdir(parents=True)
    broken = staged.cache_root() / BUCKET
    if plant == "link":
        (tmp_path / "elsewhere").mkdir()
        broken.symlink_to(tmp_path / "elsewhere")
    else:
        broken.write_text("in the way\n")
    copy = staged.local_copy(url)
    assert (
        not copy.is_relative_to(staged.cache_root()) and (copy / "train.txt").read_text() == "the real training text\n"
    )
    assert not any((tmp_path / "elsewhere").iterdir()) if plant == "link" else broken.is_file()


def test_staged_text_of_a_folder_offline_is_its_generated_corpus_and_says_so(s3, tmp_path):
    """`make text-data` offline leaves data/text/synthetic/generated_verse.txt; the FSDP recipe's data: stages the
    folder and passes ${RAYFLEET_DATA}/tiny_shakespeare.txt. The job resolves that name to the staged generated
    corpus, reads it against the manifest, and describes it as SYNTHETIC; once the real file is staged, that."""
    from rayfleet.train.data import synthetic_text, text

    folder = tmp_path / "text"
    synthetic_text.write(folder)
    url = stager.stage(folder, f"s3://{BUCKET}/runs", say=lambda _: None)
    given = f"{url.rstrip('/')}/tiny_shakespeare.txt"
    found = text.resolve(given)
    assert found == f"{url.rstrip('/')}/synthetic/generated_verse.txt"
    assert synthetic_text.describe(read_text(found), found).startswith("SYNTHETIC generated verse")
    (folder / "tiny_shakespeare.txt").write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n")
    real = f"{stager.stage(folder, f's3://{BUCKET}/runs', say=lambda _: None).rstrip('/')}/tiny_shakespeare.txt"
    assert text.resolve(real) == real and not synthetic_text.is_generated(read_text(real))
    assert text.resolve(f"s3://{BUCKET}/runs/nowhere/tiny_shakespeare.txt").endswith("nowhere/tiny_shakespeare.txt")
