"""The metrics log and the progress line."""

from __future__ import annotations

import json

from rayfleet.core.run_dir import RunDir
from rayfleet.train.metrics import MetricsLog, format_epoch, read_rows


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
    run_dir = RunDir(str(tmp_path), "run")
    log = MetricsLog(run_dir, resume_epoch=1)
    for epoch in (1, 2, 3):
        log.append(_row(epoch))
    # The checkpoint of epoch 2 is the latest that landed: epoch 3 runs again after the restart.
    resumed = MetricsLog(run_dir, resume_epoch=3)
    resumed.append(_row(3, attempt=1))
    rows = read_rows(run_dir)
    assert [(r["epoch"], r["attempt"]) for r in rows] == [(1, 0), (2, 0), (3, 1)]
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in lines] == [1, 2, 3]


def test_progress_line_has_the_numbers():
    line = format_epoch(_row(3), epochs=10)
    assert line.startswith("epoch  3/10")
    for part in ("train_loss 0.3333", "test_acc 0.5000", "1,000 img/s (500/worker)", "2.0 s"):
        assert part in line
