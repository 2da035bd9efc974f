"""The system packages `make test` needs beyond .venv, installed before anything else runs: what `make test`
calls first. Standard library only: it runs before .venv exists.

    python3.11 -m tools.system_deps    # nothing to do: silent, exit 0; else apt-get install, or one line, exit 2

The image tests build for real with podman/buildah on a debootstrap base (verified against Debian's archive
keyring; rootless podman maps users through uidmap's newuidmap), and the head-loss and served-head tests keep the
local cluster's GCS in a real redis-server. Without them the image tests skip and the cluster tests fail deep in
the run (`--gcs-store needs redis-server on PATH`), so they are checked here, once, at the start. Where a package
is missing: apt-get installs it (through sudo when not root; sudo may ask for a password on a terminal, and
must not need one elsewhere); where that cannot be done, one line names the missing packages and the command
that installs them, exit 2. `make test-quick` needs none of them and does not call this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

# Debian/Ubuntu package -> what shows it is installed: a command on PATH, or a file (an absolute path).
PACKAGES = {
    "podman": "podman",
    "buildah": "buildah",
    "debootstrap": "debootstrap",
    "debian-archive-keyring": "/usr/share/keyrings/debian-archive-keyring.gpg",
    "runc": "runc",
    "uidmap": "newuidmap",
    "redis-server": "redis-server",
}


def installed(probe: str, path: str) -> bool:
    # on PATH, as images/local-base.sh and rayfleet/local/gcs_store.py look them up (debootstrap and runc are
    # in /usr/sbin, which a plain user's PATH may lack: then they are missing for those two as well)
    return Path(probe).is_file() if probe.startswith("/") else shutil.which(probe, path=path) is not None


def missing(path: str | None = None) -> list[str]:
    """The packages not installed, in PACKAGES' order; `path` as PATH (default: this process's)."""
    path = os.environ.get("PATH", os.defpath) if path is None else path
    return [package for package, probe in PACKAGES.items() if not installed(probe, path)]


def install_command(packages: list[str]) -> str:
    return ("" if os.geteuid() == 0 else "sudo ") + "apt-get install -y " + " ".join(packages)


def apt_prefix() -> list[str] | None:
    """How to run apt-get here: as root directly, else through sudo (non-interactive without a terminal, so a
    password prompt fails at once instead of hanging CI); None where neither can."""
    if shutil.which("apt-get") is None:
        return None
    if os.geteuid() == 0:
        return []
    if shutil.which("sudo") is None:
        return None
    return ["sudo"] if sys.stdin.isatty() else ["sudo", "-n"]


def install(packages: list[str], prefix: list[str]) -> bool:
    apt = [*prefix, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"]  # through sudo, which drops the environment
    for command in ([*apt, "update", "-q"], [*apt, "install", "-y", "-q", *packages]):
        if subprocess.run(command, check=False).returncode != 0:
            return False
    return True


def main() -> int:
    needed = missing()
    if not needed:
        return 0
    prefix = apt_prefix()
    if prefix is not None:
        print(f"make test: installing the system packages it needs: {' '.join(needed)}", file=sys.stderr)
        if install(needed, prefix) and not (needed := missing()):
            return 0
    print(
        f"error: make test needs the system packages {', '.join(needed)}; install them "
        f"(Debian/Ubuntu: {install_command(needed)}) and run make test again",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
