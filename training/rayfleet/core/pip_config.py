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


def uv_flags(settings: dict[str, str]) -> list[str]:
    """`uv pip install` flags for the same sources: uv reads no pip configuration. pip's rule for several
    indexes (the best version from any of them) is uv's `unsafe-best-match`; uv's default would take the
    first index that has a package."""
    flags = ["--index-strategy", "unsafe-best-match"]
    if "index-url" in settings:
        flags += ["--index-url", settings["index-url"]]
    for key in ("extra-index-url", "find-links", "constraint"):  # pip's setting and uv's flag share the name
        flags += [arg for value in values(settings.get(key)) for arg in (f"--{key}", value)]
    if settings.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    return flags
