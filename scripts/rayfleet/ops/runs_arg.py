"""The runs the tracking verbs look at: names under a runs directory, local or s3://."""

from __future__ import annotations

import argparse
from pathlib import Path

from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import LOCAL_RUNS, RunDir
from rayfleet.core.run_name import run_name_arg


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = "run names (several: one figure / one TensorBoard)"
    parser.add_argument("runs", nargs="+", type=run_name_arg, metavar="RUN", help=what)
    parser.add_argument("--runs-dir", default=LOCAL_RUNS, help="local directory or s3://bucket/prefix (default: runs)")


def run_dirs(opts: argparse.Namespace) -> list[RunDir]:
    """The named runs; ConfigError (exit 2) when one has no metrics.jsonl."""
    root = opts.runs_dir if opts.runs_dir.startswith("s3://") else str(Path(opts.runs_dir).resolve())
    found = [RunDir(root, name) for name in opts.runs]
    missing = [r.url for r in found if "metrics.jsonl" not in r.entries()]
    if missing:
        raise ConfigError(f"no such run (no metrics.jsonl): {', '.join(missing)} (rayfleet runs lists them)")
    return found
