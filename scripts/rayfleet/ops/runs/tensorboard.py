"""Serve runs' TensorBoard event files on 127.0.0.1 (runs in S3 are synced into .rayfleet/tensorboard/ first,
in the state folder: rayfleet/core/local_state.py).

rayfleet runs tensorboard --run RUN [--run RUN ...] [--runs-dir runs|s3://b/runs] [--port 6006]
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from rayfleet.core import local_state
from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.core.moved import gone
from rayfleet.core.run_dir import RunDir, UnsafeKey
from rayfleet.ops.runs.arg import run_dirs
from rayfleet.train.tracking.events import FOLDER


def sync_root() -> Path:
    return local_state.state_dir() / "tensorboard"


def local_events(run_dir: RunDir) -> Path:
    """The run's event folder on this disk: itself, or a fresh copy of the S3 one."""
    if not run_dir.is_s3:
        return run_dir.local_copy(FOLDER, Path())
    target = sync_root() / run_dir.run_name
    shutil.rmtree(target, ignore_errors=True)
    print(f"syncing {run_dir.display(FOLDER)} -> {target}", flush=True)
    return run_dir.local_copy(FOLDER, target)  # target/tensorboard/


def command(folders: dict[str, Path], port: int) -> list[str]:
    spec = ",".join(f"{name}:{path}" for name, path in folders.items())
    return [sys.executable, "-m", "tensorboard.main", "--logdir_spec", spec, "--host", "127.0.0.1", "--port", str(port)]


def serve_tensorboard(runs: list[str], runs_dir: str, port: int = 6006) -> int:
    """`rayfleet runs tensorboard`: TensorBoard's own server on 127.0.0.1:`port`, in this process's place."""
    try:
        folders = {r.run_name: local_events(r) for r in run_dirs(runs, runs_dir)}
    except FileNotFoundError as exc:
        print(f"error: no TensorBoard events: {exc} (runs before tensorboard=true have none)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnsafeKey as exc:  # written by a job into run storage: nothing of it is downloaded
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"TensorBoard on http://127.0.0.1:{port} (Ctrl-C stops it)", flush=True)
    cmd = command(folders, port)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.runs.tensorboard", "rayfleet runs tensorboard --run RUN")
