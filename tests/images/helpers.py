"""podman for the image tests: the repository root, the engine's configuration, and `podman ...` as a command."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG = "test"
BASE = "localhost/rayfleet-local-base:bookworm"
INSTALL = "apt-get install podman buildah debootstrap runc"
# testinfra's podman:// backend runs `podman exec` with this process's environment
os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "images" / "containers.conf"))


def podman_env() -> dict:
    return {**os.environ, "CONTAINERS_CONF": str(ROOT / "images" / "containers.conf"), "RAYFLEET_ENGINE": "podman"}


def podman(*args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout, check=check
    )
