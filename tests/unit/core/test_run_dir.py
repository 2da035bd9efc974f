"""The one run directory: local files, the run record, uploads, listings, and Ray Train's view of S3."""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from rayfleet.core.run_dir import RECORD, RunDir, list_runs


def test_local_write_read_and_display(tmp_path):
    run_dir = RunDir(str(tmp_path), "run1")
    assert run_dir.write("a/b.txt", "hello") == f"{tmp_path}/run1/a/b.txt"
    assert run_dir.read("a/b.txt") == "hello"
    assert run_dir.read("missing") is None
    assert run_dir.display("x") == f"{tmp_path}/run1/x"
    assert not list((tmp_path / "run1" / "a").glob("*.tmp"))  # written through a temporary file, then renamed


def test_record_merges_fields_into_run_json(tmp_path):
    run_dir = RunDir(str(tmp_path), "run1")
    assert run_dir.record() == {}
    run_dir.update(state="PENDING", target="local")
    record = run_dir.update(state="RUNNING", job_id="raysubmit_1")
    assert record == {"state": "RUNNING", "target": "local", "job_id": "raysubmit_1"}
    assert json.loads((tmp_path / "run1" / RECORD).read_text()) == record


def test_upload_of_a_directory_keeps_its_tree(tmp_path):
    src = tmp_path / "export"
    (src / "sub").mkdir(parents=True)
    (src / "config.json").write_text("{}")
    (src / "sub" / "w.bin").write_bytes(b"\x00\x01")
    run_dir = RunDir(str(tmp_path / "runs"), "r")
    run_dir.upload("export", src)
    assert (tmp_path / "runs" / "r" / "export" / "config.json").read_text() == "{}"
    assert (tmp_path / "runs" / "r" / "export" / "sub" / "w.bin").read_bytes() == b"\x00\x01"
    assert run_dir.entries() == ["export"]


def test_list_runs_and_entries(tmp_path):
    for name in ("ddp-20261122-101500", "ddp-20261121-090000"):
        RunDir(str(tmp_path), name).write("checkpoint_000001/state.pt", b"x")
    assert list_runs(str(tmp_path)) == ["ddp-20261121-090000", "ddp-20261122-101500"]
    assert list_runs(str(tmp_path / "none")) == []
    assert RunDir(str(tmp_path), "ddp-20261121-090000").entries() == ["checkpoint_000001"]


def test_ray_storage_for_s3_maps_the_endpoint_and_carries_no_credentials():
    path, fs = RunDir("s3://bucket/prefix", "r", endpoint_url="http://127.0.0.1:5000").ray_storage()
    assert path == "bucket/prefix"  # Ray Train adds the run name itself
    assert isinstance(fs, pafs.S3FileSystem)
    # What Ray pickles to the workers: the endpoint, and no credentials (workers use their own chain).
    options = fs.__reduce__()[1][0]
    assert (options["endpoint_override"], options["scheme"]) == ("127.0.0.1:5000", "http")
    assert options["access_key"] is None and options["secret_key"] is None


def test_ray_storage_for_a_local_directory(tmp_path):
    path, fs = RunDir(str(tmp_path), "r").ray_storage()
    assert path == str(tmp_path) and isinstance(fs, pafs.LocalFileSystem)
