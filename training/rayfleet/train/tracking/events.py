"""TensorBoard event files in the run directory's `tensorboard/` folder, for `make tensorboard` or any
TensorBoard pointed at the run (S3 included: TensorBoard reads local folders, `make tensorboard` syncs).

Written with TensorBoard's own writer (torch.utils.tensorboard). A resumed attempt writes a new file with
`purge_step` at its first step: TensorBoard then drops what the earlier attempt wrote from that step on,
so the steps that ran twice show once.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from rayfleet.core.run_dir import RunDir

FOLDER = "tensorboard"


class EventFiles:
    def __init__(self, run_dir: RunDir, purge_step: int | None):
        from torch.utils.tensorboard import SummaryWriter

        self.run_dir = run_dir
        # S3 has no append: write locally and upload the folder (a few KB per file) at each flush.
        self.local = Path(tempfile.mkdtemp(prefix="rayfleet-tb-")) if run_dir.is_s3 else Path(run_dir.url) / FOLDER
        self.writer = SummaryWriter(str(self.local), purge_step=purge_step or None, flush_secs=30)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        for tag, value in values.items():
            self.writer.add_scalar(tag, value, step)

    def flush(self) -> None:
        self.writer.flush()
        if self.run_dir.is_s3:
            self.run_dir.upload(FOLDER, self.local)

    def close(self) -> None:
        self.flush()
        self.writer.close()
        if self.run_dir.is_s3:
            shutil.rmtree(self.local, ignore_errors=True)


def read_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar under a local event folder, as TensorBoard itself reads it (purged steps dropped)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep all, no sampling
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
