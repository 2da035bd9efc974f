from __future__ import annotations

import json

import pyarrow.fs as pafs

from training.metrics import MetricsLog, format_epoch, read_rows
from training.storage import Storage


def test_local_storage_paths_and_files(tmp_path):
    storage = Storage(str(tmp_path))
    path = storage.run_path("run1", "a", "b.txt")
    storage.write_text(path, "hello")
    assert storage.read_text(path) == "hello"
    assert storage.read_text(storage.run_path("run1", "missing")) is None
    assert storage.list_dir(storage.run_path("run1")) == ["a"]
    assert storage.display("run1", "x") == f"{tmp_path}/run1/x"


def test_s3_storage_maps_endpoint_and_strips_scheme():
    storage = Storage("s3://bucket/prefix", endpoint_url="http://127.0.0.1:5000")
    assert storage.is_s3 and storage.root == "bucket/prefix"
    assert storage.display("r", "metrics.jsonl") == "s3://bucket/prefix/r/metrics.jsonl"
    fs = storage.filesystem()
    assert isinstance(fs, pafs.S3FileSystem)
    # What Ray pickles to the workers: the endpoint, and no credentials (workers use their own chain).
    options = fs.__reduce__()[1][0]
    assert (options["endpoint_override"], options["scheme"]) == ("127.0.0.1:5000", "http")
    assert options["access_key"] is None and options["secret_key"] is None


def _row(epoch, attempt=0):
    return {
        "epoch": epoch,
        "train_loss": 1.0 / epoch,
        "test_loss": 1.0,
        "test_accuracy": 0.5,
        "images_per_s": 1000.0,
        "images_per_s_per_worker": 500.0,
        "epoch_s": 2.0,
        "attempt": attempt,
    }


def test_metrics_log_drops_epochs_that_will_run_again(tmp_path):
    storage = Storage(str(tmp_path))
    log = MetricsLog(storage, "run", resume_epoch=1)
    for epoch in (1, 2, 3):
        log.append(_row(epoch))
    # The checkpoint of epoch 2 is the latest that landed: epoch 3 runs again after the restart.
    resumed = MetricsLog(storage, "run", resume_epoch=3)
    resumed.append(_row(3, attempt=1))
    rows = read_rows(storage, "run")
    assert [(r["epoch"], r["attempt"]) for r in rows] == [(1, 0), (2, 0), (3, 1)]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]


def test_progress_line_has_the_numbers():
    line = format_epoch(_row(3), epochs=10)
    assert line.startswith("epoch  3/10")
    for part in ("train_loss 0.3333", "test_acc 0.5000", "1,000 img/s (500/worker)", "2.0 s"):
        assert part in line
