"""podman as the rehearsal uses it: one network, a pod per task, a container per container definition.

Every object the rehearsal creates carries the label `rayfleet.rehearsal=<id>`, so `down` finds exactly
what a rehearsal started (also after a crash) and nothing else. images/containers.conf is the engine's
configuration, as for `make build` and tests/images.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LABEL = "rayfleet.rehearsal"
INSTALL = "apt-get install podman (Debian/Ubuntu), brew install podman (macOS, then podman machine start)"


class PodmanError(Exception):
    pass


def env() -> dict:
    conf = os.environ.get("CONTAINERS_CONF") or str(ROOT / "images" / "containers.conf")
    return {**os.environ, "CONTAINERS_CONF": conf}


def installed() -> bool:
    return shutil.which("podman") is not None


def podman(
    *args: str, check: bool = True, timeout: float = 120, input: str | None = None
) -> subprocess.CompletedProcess:
    try:
        result = subprocess.run(
            ["podman", *args],
            env=env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            start_new_session=True,  # a terminal's Ctrl-C goes to the rehearsal, which then cleans up in order
        )
    except subprocess.TimeoutExpired:
        raise PodmanError(f"podman {args[0]} did not finish within {timeout:.0f}s") from None
    if check and result.returncode != 0:
        noise = ("systemd", "syslog")  # podman without systemd (health check timers) and without syslog
        lines = [line for line in (result.stderr or result.stdout).splitlines() if not any(n in line for n in noise)]
        message = " ".join(" ".join(lines).split())
        raise PodmanError(f"podman {' '.join(args[:2])}: {message[:400]}")
    return result


def image_exists(ref: str) -> bool:
    return podman("image", "exists", ref, check=False).returncode == 0


def create_network(name: str, rid: str) -> dict:
    podman("network", "create", "--label", f"{LABEL}={rid}", name)
    info = json.loads(podman("network", "inspect", name).stdout)[0]
    subnet = info["subnets"][0]
    return {"name": name, "gateway": subnet["gateway"], "subnet": subnet["subnet"]}


def secret_prefix(rid: str | None) -> str:
    """podman secrets carry no labels in every podman version: the rehearsal's are found by name."""
    return f"rayfleet-rehearsal-{rid}-" if rid else "rayfleet-rehearsal-"


def create_secret(name: str, value: str) -> None:
    podman("secret", "create", name, "-", input=value)


def state(name: str) -> dict | None:
    """The container's state (Status, ExitCode, Health), or None when it does not exist."""
    result = podman("container", "inspect", "--format", "{{json .State}}", name, check=False)
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def ip_address(name: str, network: str) -> str | None:
    result = podman("container", "inspect", "--format", "{{json .NetworkSettings.Networks}}", name, check=False)
    if result.returncode != 0:
        return None
    networks = json.loads(result.stdout) or {}
    return (networks.get(network) or {}).get("IPAddress") or None


def remove_everything(rid: str | None) -> list[str]:
    """Containers, pods, secrets and networks labelled by the rehearsal `rid` (any rehearsal when None)."""
    selector = f"label={LABEL}" + (f"={rid}" if rid else "")
    removed = []
    names = podman("ps", "-a", "--filter", selector, "--format", "{{.Names}}", check=False).stdout.split()
    if names:
        podman("rm", "-f", "-t", "10", *names, check=False, timeout=300)
        removed += [f"container {n}" for n in names]
    pods = podman("pod", "ps", "--filter", selector, "--format", "{{.Name}}", check=False).stdout.split()
    if pods:
        podman("pod", "rm", "-f", "-t", "10", *pods, check=False, timeout=300)
        removed += [f"pod {p}" for p in pods]
    prefix = secret_prefix(rid)
    for secret in podman("secret", "ls", "--format", "{{.Name}}", check=False).stdout.split():
        if secret.startswith(prefix):
            podman("secret", "rm", secret, check=False)
            removed.append(f"secret {secret}")
    volumes = podman("volume", "ls", "--filter", selector, "--format", "{{.Name}}", check=False).stdout.split()
    for volume in volumes:
        podman("volume", "rm", "-f", volume, check=False)
    for network in podman("network", "ls", "--filter", selector, "--format", "{{.Name}}", check=False).stdout.split():
        podman("network", "rm", "-f", network, check=False)
        removed.append(f"network {network}")
    return removed
