"""The test images' build, in the standard library only: `make test` starts its first part before set-up,
when there is no .venv yet.

    python3.11 -m tests.images.build --early    # what `make test` runs first; returns at once

On a fresh machine (CI's) the images' base layers cost minutes of one core: the debootstrap base and the ray
base's pip install of the pinned CUDA torch. Set-up (.venv, about 5 minutes) keeps one core busy and leaves
the other idle, so `make test` starts those layers there, in the background; the session's build
(tests/images/helpers.py: BackgroundBuild) waits for them and then finds them in podman's layer cache. Before
this, that build ran beside the first tests of both pytest workers.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TAG = "test"
BASE = "localhost/rayfleet-local-base:bookworm"
IMAGES = ("ray-head", "ray-worker", "trainer", "gpu-metrics")
MODELS_IMAGE = "ray-worker-models"  # built_images' key of ray-worker:TAG-models (the tiny GPT-NeoX preloaded)
EXIT_FILE = "exit"
# The early build's log and exit file (ignored by git); one per checkout.
EARLY = ROOT / ".test-images-early"
# ray-head is ray-base plus a few small layers: building it builds the base, the costly part; gpu-metrics is
# small but has a pip install of its own.
EARLY_IMAGES = ("ray-head", "gpu-metrics")


def podman_env() -> dict:
    return {**os.environ, "CONTAINERS_CONF": str(ROOT / "images" / "containers.conf"), "RAYFLEET_ENGINE": "podman"}


def build_images(scratch: Path, images: tuple[str, ...] = IMAGES, python: str = sys.executable) -> None:
    """`images`, tagged TAG, built for real on the local debootstrap base as `make build` builds them; with
    ray-worker, also ray-worker:TAG-models with the tiny GPT-NeoX preloaded (generated into `scratch` if needed)."""
    env = podman_env()
    subprocess.run([str(ROOT / "images" / "local-base.sh"), BASE], env=env, check=True, timeout=900)
    command = [python, "-m", "rayfleet.cli.main", "images", "build", "--tag", TAG, "--images", ",".join(images)]
    if "ray-worker" in images:
        model = ROOT / "models" / "tiny-gpt-neox"
        if not (model / "config.json").is_file():
            model = scratch / "tiny-gpt-neox"
            generate = [python, "-m", "tools.tiny_lm", str(model), "--text", str(scratch / "corpus.txt")]
            subprocess.run(generate, cwd=ROOT, check=True, timeout=300)
        command += ["--models", f"tiny-gpt-neox={model}"]
    build = subprocess.run(command, cwd=ROOT, env={**env, "BASE_IMAGE": BASE, "PYTHON_BASE_IMAGE": BASE}, timeout=1800)
    assert build.returncode == 0, "make build failed (output above)"


def start_early() -> str:
    """Start the early build as a process of its own (it outlives `make`'s recipe line); say what happened."""
    if shutil.which("podman") is None or os.environ.get("RAYFLEET_IMAGES_PREBUILT"):
        return "no podman here (or RAYFLEET_IMAGES_PREBUILT): nothing built ahead"
    if (pid := running_early_pid()) is not None:
        return f"already building in process {pid} ({EARLY / 'build.log'})"
    EARLY.mkdir(exist_ok=True)
    (EARLY / EXIT_FILE).unlink(missing_ok=True)
    with (EARLY / "build.log").open("w") as log:
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.images.build", "--early-child"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # make's Ctrl-C does not reach it; the session's build waits for it instead
        )
    (EARLY / "pid").write_text(str(child.pid))
    return f"building the images' base layers in the background (process {child.pid}, {EARLY / 'build.log'})"


def early_child() -> int:
    code = 1
    try:
        build_images(EARLY, EARLY_IMAGES)
        code = 0
    finally:
        (EARLY / EXIT_FILE).write_text(str(code))
    return code


def running_early_pid() -> int | None:
    """The early build's process while it runs (no exit file yet and the process alive), else None."""
    try:
        pid = int((EARLY / "pid").read_text())
    except (OSError, ValueError):
        return None
    if (EARLY / EXIT_FILE).exists():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # killed before it could write its exit file
    except PermissionError:
        pass  # alive, another user's
    return pid


def wait_for_early(timeout_s: float = 1800, poll_s: float = 2) -> None:
    """Wait until no early build runs: the session's build then reuses its layers instead of racing it. Its
    result does not matter here: a failed early build leaves the session's build to do it all."""
    deadline = time.monotonic() + timeout_s
    while running_early_pid() is not None and time.monotonic() < deadline:
        time.sleep(poll_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.images.build", description=__doc__.split("\n")[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--early", action="store_true", help="start the base layers' build in the background")
    group.add_argument("--early-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.early_child:
        return early_child()
    print(f"make test: {start_early()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
