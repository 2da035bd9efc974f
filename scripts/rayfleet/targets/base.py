"""What every target does with a run, and the one thing they share: packaging it into its run directory.

A target is where a run goes: `local` (the local Ray cluster, rayfleet/targets/local.py) or `ecs` (the
deployment, rayfleet/targets/ecs.py). Runs and serving pick one with `choose_target` (rayfleet/targets/run.py).
"""

from __future__ import annotations

import json
import time
from functools import partial
from pathlib import Path
from typing import Protocol

from rayfleet.core.config import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes.fit import Capacity
from rayfleet.recipes.package import package
from rayfleet.recipes.schema import LoadedRecipe
from rayfleet.recipes.submitter import now, submitter, submitter_gone


class Target(Protocol):
    """Where a run goes. `capacity` is what one worker there offers (None when it cannot be known), checked
    before anything is packaged; `submit` packages, submits and (unless detached) follows the run to its end,
    returning its exit code; a run is cancelled and its log read through its run directory, wherever it ran
    (rayfleet cancel, rayfleet logs)."""

    name: str

    def capacity(self, loaded: LoadedRecipe) -> Capacity | None: ...

    def submit(self, loaded: LoadedRecipe, extra_args: list[str], run_name: str, detach: bool) -> int: ...

    def estimate(self, loaded: LoadedRecipe) -> dict: ...


def package_into(
    loaded: LoadedRecipe, run_dir: RunDir, tmp: Path, target: str, extra_args: list[str], held: dict
) -> dict:
    """Zip the code, store zip + resolved recipe in the run directory, start run.json; return the zip's facts."""
    claimed = claim(run_dir)
    try:
        return _package_into(loaded, run_dir, tmp, target, extra_args, held, claimed)
    except BaseException:
        run_dir.remove([f"{CLAIMS}/{claimed}.json"])  # a submission that wrote no record leaves no claim
        raise


def _package_into(
    loaded: LoadedRecipe, run_dir: RunDir, tmp: Path, target: str, extra_args: list[str], held: dict, claimed: int
) -> dict:
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
        group=recipe.resources.group,  # the worker group it runs on (rayfleet/recipes/group_choice.py)
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
        submission=claimed,
        attempts=[],  # this invocation's; a relaunched trainer task on ECS continues the list
    )
    return {"path": pkg.path, "url": code_url, "sha256": pkg.sha256}


ACTIVE = ("PENDING", "QUEUED", "RUNNING")


CLAIMS = "submissions"  # in the run directory: <n>.json, one per submission of the run's name
CLAIM_STALE_S = 900.0  # a claim whose submission wrote no record by then was killed before it could


def claim(run_dir: RunDir) -> int:
    """One submission per run name, even two in the same second: each claims the next number after the record's
    last `submission`, creating `submissions/<n>.json` only if nobody has (RunDir.create: a conditional write);
    the one that finds it taken is refused (exit 2). A claim whose submitter was killed before writing the record
    is passed over once it is stale (its process gone on this host, or CLAIM_STALE_S old)."""
    record = refuse_active(run_dir)
    number = int(record.get("submission") or 0) + 1
    while not run_dir.create(f"{CLAIMS}/{number}.json", json.dumps({"submitter": submitter(), "at": time.time()})):
        taken = json.loads(run_dir.read(f"{CLAIMS}/{number}.json") or "{}")
        if submitter_gone(taken) or time.time() - float(taken.get("at", time.time())) > CLAIM_STALE_S:
            number += 1
            continue
        who = taken.get("submitter") or {}
        raise ConfigError(
            f"run {run_dir.run_name} is being submitted right now (by pid {who.get('pid', '?')} on "
            f"{who.get('host', '?')}): choose another --run-name"
        )
    return number


def refuse_active(run_dir: RunDir) -> dict:
    """One submission per run name at a time: a second one while the first is queued or running is refused
    (an ended run's name may be reused: the run resumes from its checkpoint)."""
    record = run_dir.record()
    state = record.get("state")
    if state in ACTIVE and not submitter_gone(record):
        raise ConfigError(
            f"run {run_dir.run_name} is already {state} (since {record.get('created_at', '?')}): choose another "
            f"--run-name, or cancel it first (rayfleet cancel --run {run_dir.run_name})"
        )
    return record
