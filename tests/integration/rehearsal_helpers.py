"""The rehearsal (`python -m tools.rehearsal up`) as a test runs it: a real subprocess in the foreground,
its output collected, stopped with SIGINT as Ctrl-C stops it; and what it may leave behind, looked up.

The images are the ones tests/images builds (localhost/rayfleet/<image>:test): reused when all four
exist, built the same way otherwise, so a full `make test` builds them once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.images.build import IMAGES, TAG, build_images, podman_env
from tests.images.helpers import INSTALL
from tests.integration.helpers import REPO

LABEL = "rayfleet.rehearsal"


def podman(*args: str, check: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout, check=check
    )


def require_podman() -> None:
    if shutil.which("podman") is None:
        if os.environ.get("RAYFLEET_REQUIRE_IMAGES"):
            pytest.fail(f"podman is not installed, and RAYFLEET_REQUIRE_IMAGES=1 ({INSTALL})")
        pytest.skip(f"podman not installed: the rehearsal runs the task definitions with it ({INSTALL})")


def ensure_images(scratch: Path) -> None:
    """The four images with the tag tests/images gives them, and ray-worker's models image (the rehearsal's
    group has models): reused if present, else built as it builds them."""
    names = [f"localhost/rayfleet/{i}:{TAG}" for i in IMAGES] + [f"localhost/rayfleet/ray-worker:{TAG}-models"]
    if all(podman("image", "exists", name).returncode == 0 for name in names):
        return
    build_images(scratch)


def rehearsal_cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tools.rehearsal", *args],
        cwd=REPO,
        env=env or podman_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class Rehearsal:
    """`python -m tools.rehearsal up` running in the background of a test."""

    def __init__(self, state_dir: Path, *args: str):
        self.state_dir = state_dir
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tools.rehearsal", "up", "--tag", TAG, "--state-dir", str(state_dir), *args],
            cwd=REPO,
            env={**podman_env(), "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in self.lines if text in line]
            if found:
                return found[0]
            if self.proc.poll() is not None:
                self._reader.join(timeout=10)  # the reader's last lines: it ends at the pipe's end
                raise AssertionError(f"the rehearsal exited ({self.proc.returncode}) before {text!r}:\n{self.output}")
            time.sleep(0.5)
        raise AssertionError(f"no {text!r} within {timeout:.0f}s:\n{self.output}")

    def apply(self, var_file: Path) -> str:
        """`python -m tools.rehearsal apply --var-file F`: other Terraform variables applied to this running
        rehearsal in place (tools/rehearsal/reapply.py); returns the rehearsal's line saying what changed."""
        result = rehearsal_cli(
            "apply", "--tag", TAG, "--var-file", str(var_file), "--state-dir", str(self.state_dir), timeout=600
        )
        assert result.returncode == 0, result.stdout + result.stderr + self.output[-3000:]
        return self.wait_for("[rehearsal] applied ", timeout=30)

    @property
    def state(self) -> dict:
        return json.loads((self.state_dir / "state.json").read_text())

    def env(self, identity: str = "operator") -> dict:
        """The laptop verbs' environment, from `python -m tools.rehearsal env`: the operator's keys (IAM is
        enforced); identity="inspector" for a test's own all-allowed look at moto."""
        result = rehearsal_cli("env", "--state-dir", str(self.state_dir), "--identity", identity)
        assert result.returncode == 0, result.stderr
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("AWS_PROFILE", None)
        for line in result.stdout.splitlines():
            if line.startswith("export "):
                key, _, value = line.removeprefix("export ").partition("=")
                env[key] = value
        return env

    def interrupt(self, timeout: float = 240) -> int:
        """Ctrl-C, as a terminal sends it; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def left_behind(rid: str) -> list[str]:
    """Whatever podman still holds with the rehearsal's label or secret prefix."""
    selector = f"label={LABEL}={rid}"
    found = [
        f"container {n}" for n in podman("ps", "-a", "--filter", selector, "--format", "{{.Names}}").stdout.split()
    ]
    found += [f"pod {n}" for n in podman("pod", "ps", "--filter", selector, "--format", "{{.Name}}").stdout.split()]
    found += [
        f"network {n}" for n in podman("network", "ls", "--filter", selector, "--format", "{{.Name}}").stdout.split()
    ]
    found += [
        f"secret {n}"
        for n in podman("secret", "ls", "--format", "{{.Name}}").stdout.split()
        if n.startswith(f"rayfleet-rehearsal-{rid}-")
    ]
    return found


# What `podman ps` says when a container elsewhere on the host was removed while it listed (containers/podman#11810):
# the listing failed, not the containers; it is asked again. Any other failure is the test's to see.
PS_RACE = ("does not exist in database", "no such container")


def containers(rid: str, suffix: str = "", running: bool = True) -> list[str]:
    args = ["ps", "--filter", f"label={LABEL}={rid}", "--format", "{{.Names}}"]
    if not running:
        args.insert(1, "-a")
    for _ in range(5):
        listed = podman(*args)
        if listed.returncode == 0 or not any(text in listed.stderr for text in PS_RACE):
            break
    assert listed.returncode == 0, f"podman ps failed: {listed.stderr}"  # never read as "no containers"
    return sorted(n for n in listed.stdout.split() if n.endswith(suffix))


def dashboard_nodes_script(token_env: str, each: str) -> str:
    """A script for inside the head container: the dashboard's node summary, `each` (an expression of `n`,
    one listed node) printed as a JSON list."""
    return (
        "import json,os,urllib.request;"
        "r=urllib.request.Request('http://127.0.0.1:8265/nodes?view=summary',"
        f"headers={{'Authorization':'Bearer '+os.environ['{token_env}']}});"
        "d=json.load(urllib.request.urlopen(r,timeout=5));"
        f"print(json.dumps([{each} for n in d['data']['summary']]))"
    )


def alive_node_ips(head_container: str, token_env: str = "RAY_AUTH_TOKEN") -> set[str]:
    """The IPs of the Ray nodes the head's dashboard lists as alive."""
    alive = "n.get('ip') if n.get('raylet',{}).get('state')=='ALIVE' else None"
    return {ip for ip in _dashboard_nodes(head_container, dashboard_nodes_script(token_env, alive)) if ip}


def container_ip(name: str) -> str:
    return podman("exec", name, "hostname", "-I").stdout.split()[0]


def ray_nodes_alive(head_container: str, token_env: str = "RAY_AUTH_TOKEN") -> int:
    """Alive Ray nodes as the head's dashboard lists them (asked from inside the head container)."""
    script = dashboard_nodes_script(token_env, "n.get('raylet',{}).get('state')=='ALIVE'")
    return sum(_dashboard_nodes(head_container, script))


def _dashboard_nodes(head_container: str, script: str) -> list:
    # The dashboard of a loaded head answers 500 now and then (seen in CI; three 500s in a row on a shared
    # 2-core machine beside other sessions): ask again for up to 30 s.
    deadline = time.monotonic() + 30
    while True:
        result = podman("exec", head_container, "python", "-c", script, timeout=60)
        if result.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def nodes_seen(head_container: str, rid: str, token_env: str = "RAY_AUTH_TOKEN") -> dict:
    """What to show when the head's count of nodes is not what a test expects: every node its dashboard lists
    (IP, raylet state, head or not), the rehearsal's containers by IP (and every one that ran), `ray status` as
    the head prints it and the tail of the autoscaler monitor's log behind it."""
    raylet = "n.get('raylet',{})"
    each = f"(n.get('ip'),{raylet}.get('state'),{raylet}.get('isHeadNode'),{raylet}.get('nodeId','')[:12])"
    script = dashboard_nodes_script(token_env, each)
    listed = podman("exec", head_container, "python", "-c", script, timeout=60)
    ips = {}
    for name in containers(rid, running=True):
        shown = podman("exec", name, "hostname", "-I", timeout=30)
        ips[name] = shown.stdout.split() if shown.returncode == 0 else "(no answer)"
    status = podman("exec", head_container, "ray", "status", timeout=120)
    # `ray status` prints what the head's autoscaler monitor last wrote: its log says which nodes it was given
    monitor = podman("exec", head_container, "sh", "-c", "tail -n 40 /tmp/ray/session_latest/logs/monitor.log")
    every = ["ps", "-a", "--filter", f"label={LABEL}={rid}", "--format", "{{.Names}} {{.Status}}"]
    return {
        "every container, exited too": podman(*every).stdout.strip().splitlines(),
        "dashboard": listed.stdout.strip() or listed.stderr[-500:],
        "containers": ips,
        "ray status": status.stdout,
        "monitor.log": monitor.stdout[-4000:],
    }


def run_verb(env: dict, module: str, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def start_verb(env: dict, module: str, *args: str, out=None) -> subprocess.Popen:
    """The verb started; its output in a pipe, or in `out` (an open file) when the test polls for a long time
    before reading it: a pipe nobody reads fills, and the verb would block writing."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=env,
        stdout=out if out is not None else subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
