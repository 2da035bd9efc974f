"""Ray Train's worker API over a run folder on a NON-local pyarrow filesystem, installed through Ray's own seam
(`ray.train.v2._internal.execution.train_fn_utils.set_train_fn_utils`, what Ray's local mode uses), so the
job's real checkpoint code runs in a plain process: `ray.train.report` copies a rank's files into the run's
`<name>/` folder as Ray Train's upload does (ranks merge into one folder), and the Checkpoint objects it hands
back are on a `SubTreeFileSystem`, so `as_directory()` downloads into Ray's shared `/tmp/checkpoint_tmp_<uuid>`
exactly as it does from S3. Registration (the controller's part) is the test's: `register(name)`, in order.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyarrow.fs import LocalFileSystem, SubTreeFileSystem
from ray.train import Checkpoint, ReportedCheckpoint, ReportedCheckpointStatus
from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils, set_train_fn_utils


def storage_fs(root: Path) -> SubTreeFileSystem:
    return SubTreeFileSystem(str(root), LocalFileSystem())


class RunStorage(LocalTrainFnUtils):
    def __init__(self, root: Path, run: str = "run", rank: int = 0, world: int = 1, kept=None):
        super().__init__(experiment_name=run, world_size=world, world_rank=rank)
        self.root, self.run = Path(root), run
        self.kept: list[Checkpoint] = list(kept or [])  # registered, oldest first, as Ray's snapshot lists them

    def folder(self, name: str) -> Path:
        return self.root / self.run / name

    def report(self, metrics, checkpoint=None, checkpoint_dir_name=None, **kwargs) -> None:
        super().report(metrics, checkpoint, checkpoint_dir_name, **kwargs)
        if checkpoint is not None:
            upload = kwargs.get("checkpoint_upload_fn")
            if upload is not None:  # an Uploads write: it runs just before Ray Train's own copy
                upload(checkpoint, checkpoint_dir_name)
            shutil.copytree(checkpoint.path, self.folder(checkpoint_dir_name), dirs_exist_ok=True)

    def register(self, name: str) -> Checkpoint:
        made = Checkpoint(f"{self.run}/{name}", filesystem=storage_fs(self.root))
        self.kept.append(made)
        return made

    def get_checkpoint(self):
        return self.kept[-1] if self.kept else None

    def get_all_reported_checkpoints(self, consistency_mode=None, timeout_s=None):
        return [ReportedCheckpoint(c, {}, ReportedCheckpointStatus.COMMITTED) for c in self.kept]


@contextmanager
def installed(session: RunStorage) -> Iterator[RunStorage]:
    set_train_fn_utils(session)
    try:
        yield session
    finally:
        set_train_fn_utils(None)
