"""Serve runs' TensorBoard event files on 127.0.0.1 (runs in S3 are synced into .rayfleet/tensorboard/ first,
in the state folder: rayfleet/core/local_state.py).

python -m rayfleet.ops.tensorboard RUN [RUN ...] [--runs-dir runs|s3://b/runs] [--port 6006]
make tensorboard RUN=ddp-20261124-101500
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

from rayfleet.core import local_state
from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.core.run_dir import RunDir, UnsafeKey
from rayfleet.ops.runs_arg import add_arguments, run_dirs
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayfleet.ops.tensorboard", description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--port", type=int, default=6006)
    opts = parser.parse_args(argv)
    try:
        folders = {r.run_name: local_events(r) for r in run_dirs(opts)}
    except FileNotFoundError as exc:
        print(f"error: no TensorBoard events: {exc} (runs before tensorboard=true have none)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except UnsafeKey as exc:  # written by a job into run storage: nothing of it is downloaded
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"TensorBoard on http://127.0.0.1:{opts.port} (Ctrl-C stops it)", flush=True)
    cmd = command(folders, opts.port)
    os.execv(cmd[0], cmd)  # TensorBoard's own server, in this process's place


if __name__ == "__main__":
    sys.exit(main())
