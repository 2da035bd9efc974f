"""Per-epoch metrics: one progress line per epoch (rank 0 only) and `metrics.jsonl` in the run directory."""

from __future__ import annotations

import json

from training.storage import Storage

METRICS_FILE = "metrics.jsonl"


class MetricsLog:
    """metrics.jsonl, rewritten whole each epoch (S3 has no append).

    On resume the rows of epochs after the checkpoint are dropped: those epochs run again, so each epoch
    appears exactly once in the final file.
    """

    def __init__(self, storage: Storage, run_name: str, resume_epoch: int, key: str = "epoch"):
        self.storage = storage
        self.path = storage.run_path(run_name, METRICS_FILE)
        self.rows = [row for row in read_rows(storage, run_name) if row[key] < resume_epoch]

    def append(self, row: dict) -> None:
        self.rows.append(row)
        self.storage.write_text(self.path, "".join(json.dumps(r) + "\n" for r in self.rows))


def read_rows(storage: Storage, run_name: str) -> list[dict]:
    text = storage.read_text(storage.run_path(run_name, METRICS_FILE)) or ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def format_epoch(row: dict, epochs: int) -> str:
    width = len(str(epochs))
    return (
        f"epoch {row['epoch']:>{width}}/{epochs}  train_loss {row['train_loss']:.4f}  "
        f"test_loss {row['test_loss']:.4f}  test_acc {row['test_accuracy']:.4f}  "
        f"{row['images_per_s']:,.0f} img/s ({row['images_per_s_per_worker']:,.0f}/worker)  "
        f"{row['epoch_s']:.1f} s"
    )
