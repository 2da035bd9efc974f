"""The run directory against a real S3 endpoint (moto_server): the same calls as on a local disk."""

from __future__ import annotations

import pytest

from rayfleet.core.run_dir import RunDir, list_runs

pytestmark = pytest.mark.integration


def as_a_job(moto, monkeypatch) -> None:
    """This process holds the task role's credentials (a job's, which writes run directories and the queue)."""
    for key, value in moto.as_identity("task").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")


def test_s3_run_directory_round_trip(moto, monkeypatch, tmp_path, rendered_bucket):
    as_a_job(moto, monkeypatch)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    moto.inspector("s3").create_bucket(Bucket=rendered_bucket)
    run_dir = RunDir(f"s3://{rendered_bucket}/runs", "ddp-1", endpoint_url=moto.url)
    assert run_dir.read("run.json") is None and run_dir.record() == {}
    run_dir.update(state="SUBMITTED", task_arn="arn:task/1")
    run_dir.update(state="RUNNING")
    assert run_dir.record() == {"state": "RUNNING", "task_arn": "arn:task/1"}
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "config.json").write_text("{}")
    assert run_dir.upload("export", tmp_path / "export") == f"s3://{rendered_bucket}/runs/ddp-1/export"
    run_dir.write("checkpoint_000002/state.pt", b"x")
    assert run_dir.entries() == ["checkpoint_000002", "export", "run.json"]
    body = moto.inspector("s3").get_object(Bucket=rendered_bucket, Key="runs/ddp-1/export/config.json")["Body"].read()
    assert body == b"{}"
    RunDir(f"s3://{rendered_bucket}/runs", "ddp-0", endpoint_url=moto.url).write("run.json", "{}")
    assert list_runs(f"s3://{rendered_bucket}/runs", endpoint_url=moto.url) == ["ddp-0", "ddp-1"]
    # The record's one writer, and the events of the others, in S3 as on disk (tests/unit/core/test_run_dir.py).
    other = RunDir(f"s3://{rendered_bucket}/runs", "ddp-1", endpoint_url=moto.url)
    assert other.send("lost", state="LOST")["state"] == "LOST"
    assert other.send("mlflow", mlflow_run_id="m")["task_arn"] == "arn:task/1"
    events = moto.inspector("s3").list_objects_v2(Bucket=rendered_bucket, Prefix="runs/ddp-1/events/")["Contents"]
    assert [o["Key"].rsplit("-", 1)[-1] for o in events] == ["lost.json", "mlflow.json"]
    assert run_dir.update(state="RUNNING")["mlflow_run_id"] == "m"  # folded in, then the owner's own state
    assert "Contents" not in moto.inspector("s3").list_objects_v2(Bucket=rendered_bucket, Prefix="runs/ddp-1/events/")
    assert run_dir.record() == {"state": "RUNNING", "task_arn": "arn:task/1", "mlflow_run_id": "m"}
    # A run name's submission claim: S3's conditional write lets the first through, and only the first.
    assert run_dir.create("submissions/1.json", "{}") and not other.create("submissions/1.json", "{}")


def results_bucket(moto, monkeypatch, bucket):
    """The results bucket on the test's moto server (made by the inspector, as Terraform makes it), and the
    task role's credentials for this process. Returns the inspector's S3 client (what a test plants with)."""
    as_a_job(moto, monkeypatch)
    s3 = moto.inspector("s3")
    s3.create_bucket(Bucket=bucket)
    return s3


@pytest.mark.parametrize(
    "planted",
    [
        "runs/r/tensorboard/../../../../Makefile",  # up and out of the download folder
        "runs/r/tensorboard/sub/../../../outside.txt",
        "runs/r/tensorboard//etc/outside.txt",  # an absolute path after the prefix
        "runs/r/tensorboard/./outside.txt",
    ],
)
def test_a_key_that_would_leave_the_download_folder_is_refused_and_nothing_lands_outside(
    moto, monkeypatch, tmp_path, planted, rendered_bucket
):
    """Any job can write run storage: a planted key with `..`, `.` or empty segments stops the download with
    one line naming it, and nothing is written outside the folder (issue 27, finding 1)."""
    from rayfleet.core.run_dir import UnsafeKey

    s3 = results_bucket(moto, monkeypatch, rendered_bucket)
    s3.put_object(Bucket=rendered_bucket, Key="runs/r/tensorboard/events.out", Body=b"ok")
    s3.put_object(Bucket=rendered_bucket, Key=planted, Body=b"owned")
    scratch = tmp_path / "a" / "b" / "c" / "scratch"
    scratch.mkdir(parents=True)
    before = {p for p in tmp_path.rglob("*")}
    with pytest.raises(UnsafeKey, match=f"refusing to download s3://{rendered_bucket}/{planted}") as refused:
        RunDir(f"s3://{rendered_bucket}/runs", "r", endpoint_url=moto.url).local_copy("tensorboard", scratch)
    assert "\n" not in str(refused.value)
    written = {p for p in tmp_path.rglob("*")} - before
    assert all(p.is_relative_to(scratch / "tensorboard") for p in written), written
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and p.read_bytes() == b"owned"]


def test_a_folder_with_a_folder_marker_downloads_whole(moto, monkeypatch, tmp_path, rendered_bucket):
    """The console's "create folder" writes an empty key ending in "/": skipped, the files below still come."""
    s3 = results_bucket(moto, monkeypatch, rendered_bucket)
    s3.put_object(Bucket=rendered_bucket, Key="runs/r/export/", Body=b"")
    s3.put_object(Bucket=rendered_bucket, Key="runs/r/export/sub/config.json", Body=b"{}")
    folder = RunDir(f"s3://{rendered_bucket}/runs", "r", endpoint_url=moto.url).local_copy("export", tmp_path)
    assert folder == tmp_path / "export" and (folder / "sub" / "config.json").read_bytes() == b"{}"


def test_the_queue_and_its_ledger_in_s3(moto, monkeypatch, rendered_bucket):
    """The run queue's entries and its budget's ledger (rayfleet/core/run_queue.py) in a bucket, under queue/
    alone (the prefix the task role may write): an entry, a run's spending once it ended, the listing that
    reads both without taking the ledger's folder for an entry."""
    from rayfleet.core.run_queue import RUNNING, Budget, Entry, Queue

    results_bucket(moto, monkeypatch, rendered_bucket)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto.url)
    queue = Queue(f"s3://{rendered_bucket}", Budget(10.0, "total"))
    ended = Entry(run="a", priority=0, submitted_at=0.0, workers=1, cpus_per_worker=1.0, usd_per_hour=3.6)
    ended.admitted_at = 1000.0
    queue.record_spent(ended, 2000.0)  # 1000 s at $3.60 an hour
    running = Entry(run="b", priority=0, submitted_at=0.0, workers=1, cpus_per_worker=1.0, usd_per_hour=7.2)
    running.state, running.admitted_at, running.heartbeat_at = RUNNING, 1500.0, 2000.0
    queue.put(running)
    assert [e.run for e in queue.entries(2000.0)] == ["b"]
    assert queue.spent(0.0, 2000.0) == pytest.approx(2.0)  # $1 in the ledger, $1 so far for b
    keys = sorted(o["Key"] for o in moto.inspector("s3").list_objects_v2(Bucket=rendered_bucket)["Contents"])
    assert keys == ["queue/b.json", "queue/spent/a-1000.json"]
