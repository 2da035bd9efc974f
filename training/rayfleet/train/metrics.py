"""Per-epoch metrics: one progress line per epoch (rank 0 only) and `metrics.jsonl` in the run directory."""

from __future__ import annotations

import json

from rayfleet.core.run_dir import RunDir

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """metrics.jsonl, rewritten whole each epoch (S3 has no append).

    On resume the rows of epochs after the checkpoint are dropped: those epochs run again, so each epoch
    appears exactly once in the final file.
    """

    def __init__(self, run_dir: RunDir, resume_epoch: int, key: str = "epoch"):
        self.run_dir = run_dir
        self.rows = [row for row in read_rows(run_dir) if row[key] < resume_epoch]

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self.run_dir.write(METRICS_FILE, "".join(json.dumps(r) + "\n" for r in self.rows))


def read_rows(run_dir: RunDir) -> list[dict]:
    text = run_dir.read(METRICS_FILE) or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def format_epoch(row: dict, epochs: int) -> str:
    width = len(str(epochs))
    return (
        f"epoch {row['epoch']:>{width}}/{epochs}  train_loss {row['train_loss']:.4f}  "
        f"test_loss {row['test_loss']:.4f}  test_acc {row['test_accuracy']:.4f}  "
        f"{row['images_per_s']:,.0f} img/s ({row['images_per_s_per_worker']:,.0f}/worker)  "
        f"{row['epoch_s']:.1f} s"
    )
