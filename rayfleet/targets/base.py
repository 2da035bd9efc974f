"""What every target does with a run, and the one thing they share: packaging it into its run directory.

A target is where a run goes: `local` (the local Ray cluster, rayfleet/targets/local.py) or `ecs` (the
deployment, rayfleet/targets/ecs.py). Runs and serving pick one with `choose_target` (rayfleet/targets/run.py).
"""

from __future__ import annotations

import argparse
import re
from functools import partial
from pathlib import Path
from typing import Protocol

from rayfleet.core.config import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes.fit import Capacity
from rayfleet.recipes.job import now, submitter, submitter_gone
from rayfleet.recipes.package import package
from rayfleet.recipes.schema import LoadedRecipe
from rayfleet.train.job_config import RUN_NAME_PATTERN


class Target(Protocol):
    """Where a run goes. `capacity` is what one worker there offers (None when it cannot be known), checked
    before anything is packaged; `submit` packages, submits and (unless detached) follows the run to its end,
    returning its exit code; a run is cancelled and its log read through its run directory, wherever it ran
    (rayfleet cancel, rayfleet logs)."""

    name: str

    def capacity(self, loaded: LoadedRecipe) -> Capacity | None: ...

    def submit(self, loaded: LoadedRecipe, extra_args: list[str], run_name: str, detach: bool) -> int: ...


def package_into(
    loaded: LoadedRecipe, run_dir: RunDir, tmp: Path, target: str, extra_args: list[str], held: dict
) -> dict:
    """Zip the code, store zip + resolved recipe in the run directory, start run.json; return the zip's facts."""
    refuse_active(run_dir)
    recipe = loaded.recipe
    pkg = package(loaded.code_dir, tmp / "code.zip", recipe.exclude)
    print(
        f"[rayfleet] packaged {pkg.files} files ({pkg.bytes / 1024:,.0f} KiB) from {loaded.code_dir}, "
        f"sha256 {pkg.sha256[:12]}",
        flush=True,
    )
    if pkg.left_out:
        shown = ", ".join(pkg.left_out[:5]) + (f" and {len(pkg.left_out) - 5} more" if len(pkg.left_out) > 5 else "")
        print(f"[rayfleet] left out {len(pkg.left_out)} file(s) that look like state or keys: {shown}", flush=True)
    code_url = run_dir.upload(f"code-{pkg.sha256[:12]}.zip", pkg.path)
    run_dir.write("recipe.yaml", recipe.to_yaml())
    # Locally this process follows the job and owns run.json; on ECS the trainer's driver does, and this
    # submitter sends the record's start as an event.
    write = run_dir.update if target == "local" else partial(run_dir.send, "created")
    write(
        run_name=run_dir.run_name,
        recipe=recipe.name,
        recipe_file=str(loaded.path),
        target=target,
        code=code_url,
        code_sha256=pkg.sha256,
        code_files=pkg.files,
        extra_args=extra_args,
        state="PENDING",
        created_at=now(),
        submitter=submitter(),
        held=held,
        attempts=[],  # this invocation's; a relaunched trainer task on ECS continues the list
    )
    return {"path": pkg.path, "url": code_url, "sha256": pkg.sha256}


ACTIVE = ("PENDING", "QUEUED", "RUNNING")


def refuse_active(run_dir: RunDir) -> None:
    """One submission per run name at a time: a second one while the first is queued or running is refused
    (an ended run's name may be reused: the run resumes from its checkpoint)."""
    record = run_dir.record()
    state = record.get("state")
    if state in ACTIVE and not submitter_gone(record):
        raise ConfigError(
            f"run {run_dir.run_name} is already {state} (since {record.get('created_at', '?')}): choose another "
            f"--run-name, or cancel it first (rayfleet cancel --run {run_dir.run_name})"
        )


def run_name_arg(value: str) -> str:
    """A run name is a folder and an S3 prefix: the jobs' own rule (letters, digits, . _ -; no path)."""
    if not re.fullmatch(RUN_NAME_PATTERN, value):
        raise argparse.ArgumentTypeError(
            f"{value!r}: a run name is up to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return value
