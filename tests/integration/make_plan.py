"""What a make target runs, read from `make -n` (the command make would run, prerequisites left out), so a test
runs a shortcut's exact `rayfleet` command instead of a copy of it: tests/unit/test_make_shortcuts.py parses
it, tests/integration/fsdp_recipe_run.py runs `make train-fsdp`'s on the local cluster."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.integration.helpers import REPO


def make_n(target: str, *variables: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "-n", "--no-print-directory", target, *variables],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def planned(target: str, *variables: str) -> tuple[list[str], list[str]]:
    """The environment assignments and the `rayfleet` argv that `make -n target` prints."""
    result = make_n(target, *variables)
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if re.search(r"bin/rayfleet ", line)]
    words = shlex.split(line)
    at = next(i for i, w in enumerate(words) if w.endswith("bin/rayfleet"))
    return words[:at], words[at + 1 :]


def command_from_anywhere(target: str, *variables: str) -> tuple[list[str], dict[str, str]]:
    """`make -n target`'s `rayfleet` command, runnable from another folder, and the environment it needs
    there: the paths make gives relative to the repository (the recipe files) made absolute, everything else as
    make prints it; `rayfleet` is its console script's module (rayfleet.cli.main) run by this interpreter with
    this checkout first on its path, so a copied virtualenv's script or editable install cannot put another
    checkout's code in its place. A run's launch folder (${RAYFLEET_LAUNCH_DIR}) is the folder it starts from."""
    env, argv = planned(target, *variables)
    assert not env, env  # nothing set in the environment by make for this target
    absolute = [str(REPO / word) if not Path(word).is_absolute() and (REPO / word).is_file() else word for word in argv]
    return [sys.executable, "-m", "rayfleet.cli.main", *absolute], {"PYTHONPATH": str(REPO)}
