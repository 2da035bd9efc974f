"""podman for the image tests (and the rehearsal, which runs the same images): `podman ...` as a command, the
flags and volumes of a container run as ECS runs it, and the session's background build of the four test
images (what it builds: tests/images/build.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.images.build import EXIT_FILE, ROOT, podman_env
from tools.system_deps import PACKAGES, install_command

INSTALL = f"`make test` installs them: {install_command(list(PACKAGES))}"


def podman(*args: str, check: bool = True, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *args], env=podman_env(), capture_output=True, text=True, timeout=timeout, check=check
    )


# How ECS runs every container of the project (infra/modules/ray/task_definitions.tf, issue 27 item 5): a
# read-only root file system, no capability, no-new-privileges, the image's own non-root user. podman, unlike
# Docker, would mount tmpfs on /tmp, /var/tmp and /run of a --read-only container, which would hide a write
# there: --read-only-tmpfs=false, so what is writable is only what ECS makes writable (volumes, /dev/shm).
def locked_down(user: str) -> list[str]:
    return [
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--user",
        user,
    ]


@contextmanager
def task_volumes(*paths: str):
    """Empty named volumes, one per path, as `-v` arguments: like the task-scoped Docker volumes of the task
    definitions, they start as a copy of the image's directory there (content, owner and mode)."""
    names = [f"rf-test-{uuid.uuid4().hex[:8]}" for _ in paths]
    try:
        for name in names:
            podman("volume", "create", name)
        yield [arg for name, path in zip(names, paths, strict=True) for arg in ("-v", f"{name}:{path}")]
    finally:
        for name in names:
            podman("volume", "rm", "-f", name, check=False)


class BackgroundBuild:
    """The image build, started as the session starts (tests/conftest.py) so that it runs beside the unit and
    infra tests, which come first and mostly use one core, instead of in front of the image tests."""

    def __init__(self, scratch: Path):
        self.scratch = scratch
        self.log = scratch / "build.log"
        # its exit code also lands in the file EXIT_FILE, for the xdist workers that wait on a controller's build
        code = (
            "import sys, pathlib, traceback, tests.images.build as b\n"
            "scratch = pathlib.Path(sys.argv[1])\n"
            "try:\n    b.wait_for_early(); b.build_images(scratch); code = 0\n"
            "except BaseException:\n    traceback.print_exc(); code = 1\n"
            f"(scratch / {EXIT_FILE!r}).write_text(str(code)); sys.exit(code)"
        )
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(  # its own process group: stop() ends podman's build with it
                [sys.executable, "-c", code, str(scratch)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self) -> None:
        wait_for_exit_file(self.scratch, self.proc.wait)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        elif self.proc.returncode != 0:
            return  # a failed build keeps its log, which the failing test named
        shutil.rmtree(self.scratch, ignore_errors=True)


BUILD = pytest.StashKey[BackgroundBuild]()
# Where an xdist controller's build writes (tests/conftest.py sets it before the workers start, which inherit it).
BUILD_DIR_ENV = "RAYFLEET_TEST_IMAGE_BUILD"


def wait_for_exit_file(scratch: Path, wait=None, timeout_s: float = 3600) -> None:
    """Wait for the build in `scratch` to end (`wait`: its process, when this process started it); raise with
    its log's end unless it succeeded."""
    exit_file = scratch / EXIT_FILE
    if wait is not None:
        wait()
    deadline = time.monotonic() + timeout_s
    while not exit_file.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"the image build in {scratch} did not end in {timeout_s:.0f} s")
        time.sleep(2)
    code = exit_file.read_text().strip()
    if code != "0":
        log = scratch / "build.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:]) if log.exists() else ""
        raise AssertionError(f"the image build failed (exit {code}); {log} ends:\n{tail}")


def wait_for_background_build(config) -> bool:
    """True once the session's background build has finished well (this process's, or an xdist controller's,
    named by BUILD_DIR_ENV); False when none was started."""
    build = config.stash.get(BUILD, None)
    if build is not None:
        build.wait()
        return True
    if os.environ.get(BUILD_DIR_ENV):
        wait_for_exit_file(Path(os.environ[BUILD_DIR_ENV]))
        return True
    return False
