"""The runs the tracking verbs look at: names under a runs directory, local or s3://."""

from __future__ import annotations

from pathlib import Path

from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir


def run_dirs(runs: list[str], runs_dir: str) -> list[RunDir]:
    """The named runs; ConfigError (exit 2) when one has no metrics.jsonl."""
    root = runs_dir if runs_dir.startswith("s3://") else str(Path(runs_dir).resolve())
    found = [RunDir(root, name) for name in runs]
    missing = [r.url for r in found if "metrics.jsonl" not in r.entries()]
    if missing:
        raise ConfigError(f"no such run (no metrics.jsonl): {', '.join(missing)} (rayfleet runs lists them)")
    return found
