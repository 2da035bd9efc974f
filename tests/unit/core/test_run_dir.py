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
    assert options["connect_timeout"] >= 10  # not the SDK's 1 s: a loaded node's connect is slow, not gone
    assert options["request_timeout"] >= 60  # not the SDK's 3 s without a byte (curl's low-speed limit on Linux)


def test_ray_storage_for_a_local_directory(tmp_path):
    path, fs = RunDir(str(tmp_path), "r").ray_storage()
    assert path == str(tmp_path) and isinstance(fs, pafs.LocalFileSystem)


def test_other_processes_send_events_that_every_read_applies_and_the_owner_folds(tmp_path):
    """run.json has one writer (the job's follower); the rest send events: nothing one process writes is lost
    to another's read-modify-write."""
    owner = RunDir(str(tmp_path), "r1")
    owner.update(state="RUNNING", attempts=[{"attempt": 1}])
    elsewhere = RunDir(str(tmp_path), "r1")  # say the ECS submitter, or a listing on another laptop
    after = elsewhere.send("mlflow", mlflow_run_id="m1")
    assert after["mlflow_run_id"] == "m1" and after["state"] == "RUNNING"
    on_disk = json.loads((tmp_path / "r1" / RECORD).read_text())
    assert "mlflow_run_id" not in on_disk  # run.json is the owner's alone
    folded = owner.update(state="SUCCEEDED")
    assert folded["mlflow_run_id"] == "m1" and folded["state"] == "SUCCEEDED"
    assert json.loads((tmp_path / "r1" / RECORD).read_text())["mlflow_run_id"] == "m1"
    assert not list((tmp_path / "r1" / "events").glob("*.json"))  # folded events are removed
    assert owner.record()["attempts"] == [{"attempt": 1}]


def test_events_apply_in_the_order_sent_and_an_owner_write_supersedes_older_ones(tmp_path):
    run = RunDir(str(tmp_path), "r2")
    run.send("created", state="PENDING", code="c1")
    run.send("submitted", state="SUBMITTED", task_arn="t1")
    assert run.record() == {"state": "SUBMITTED", "code": "c1", "task_arn": "t1"}  # before any owner write
    run.update(state="RUNNING")
    run.send("lost", state="LOST")
    assert run.record()["state"] == "LOST"  # sent after the owner's last write: it applies
    run.update(state="SUCCEEDED")  # the owner folds the LOST event in, then its own state
    assert run.record()["state"] == "SUCCEEDED"
    # An event left behind by a fold whose removal did not finish never applies twice.
    left = tmp_path / "r2" / "events" / "00000000000000000001-host-1-submitted.json"
    left.write_text(json.dumps({"state": "SUBMITTED"}))
    assert run.record()["state"] == "SUCCEEDED"


def test_an_event_sent_after_the_owners_listing_is_kept_for_the_next_read(tmp_path, monkeypatch):
    run = RunDir(str(tmp_path), "r3")
    run.update(state="RUNNING")
    listed = RunDir._event_names

    def then_someone_sends(self):
        names = listed(self)
        if not (tmp_path / "r3" / "late.flag").exists():
            (tmp_path / "r3" / "late.flag").write_text("")
            RunDir(str(tmp_path), "r3").send("mlflow", mlflow_run_id="late")
        return names

    monkeypatch.setattr(RunDir, "_event_names", then_someone_sends)
    run.update(state="SUCCEEDED")
    monkeypatch.undo()
    assert run.record()["mlflow_run_id"] == "late"  # not removed unseen: the next read still applies it


def test_a_batch_delete_that_refused_keys_is_not_taken_as_done(monkeypatch):
    """S3's DeleteObjects answers 200 and lists each key it refused (AccessDenied, say): folded events left
    behind would be folded again, so a refusal is an error, not silence."""
    import pytest

    from rayfleet.core.errors import RayfleetError

    class S3:
        def delete_objects(self, Bucket, Delete):
            keys = [o["Key"] for o in Delete["Objects"]]
            return {"Errors": [{"Key": keys[1], "Code": "AccessDenied", "Message": "Access Denied"}]}

    run_dir = RunDir("s3://bucket/runs", "r1")
    monkeypatch.setattr(RunDir, "_s3", lambda self: S3())
    with pytest.raises(RayfleetError, match=r"could not delete 1 file\(s\) .*runs/r1/events/b.json.*AccessDenied"):
        run_dir.remove(["events/a.json", "events/b.json"])
