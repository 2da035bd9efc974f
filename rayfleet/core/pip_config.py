"""The host's pip configuration, as pip itself reports it (`pip config list`): package indexes, local wheel
directories, constraints and the CA bundle. `make build` mounts them into podman builds
(rayfleet/ops/images.py) and `make setup` hands them to uv (tools/uv_install.py), so both install from what
pip on this machine installs from. Standard library only: `make setup` runs it before anything is installed.
"""

from __future__ import annotations

import subprocess
import sys

# Which section wins when several set a key: the environment's PIP_* over `install` over `global`, as pip applies them.
SCOPES = ("global", "install", ":env:")


def settings(python: str = sys.executable) -> dict[str, str]:
    """pip's effective setting per key (`index-url`, `extra-index-url`, `find-links`, `constraint`, `cert`,
    ...), values as pip holds them (space-separated where pip takes several); {} when pip says nothing."""
    result = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    found: dict[str, dict[str, str]] = {}
    for line in result.stdout.splitlines():
        name, _, value = line.partition("=")
        scope, _, key = name.rpartition(".")
        if scope in SCOPES and key:
            found.setdefault(key, {})[scope] = value.strip().strip("'\"")
    return {key: next(by[s] for s in reversed(SCOPES) if s in by) for key, by in found.items()}


def values(setting: str | None) -> list[str]:
    """A setting pip takes several of, split (pip separates them with whitespace)."""
    return (setting or "").split()
