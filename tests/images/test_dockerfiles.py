"""The Dockerfiles themselves: hadolint clean, pinned to the one version source, labelled, non-root, no
secrets, and a build context that carries only what the images copy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "images"
DOCKERFILES = sorted([*IMAGES.glob("*/Dockerfile"), *IMAGES.glob("*/*.Dockerfile")])
HADOLINT = Path(sys.executable).parent / "hadolint"


def pin(package: str) -> str:
    for line in (ROOT / "requirements" / "train.txt").read_text().splitlines():
        match = re.match(rf"{re.escape(package)}(\[[^\]]*\])?==([\w.]+)", line.strip())
        if match:
            return match.group(2)
    raise AssertionError(f"{package} not pinned")


def test_the_four_images_and_the_shared_base_exist():
    assert {p.parent.name for p in IMAGES.glob("*/Dockerfile")} == {"ray-head", "ray-worker", "trainer", "gpu-metrics"}
    assert (IMAGES / "base" / "ray.Dockerfile").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(IMAGES)))
def test_hadolint_finds_nothing(dockerfile):
    result = subprocess.run(
        [str(HADOLINT), "--config", str(IMAGES / ".hadolint.yaml"), str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_hadolint_ignore_has_its_reason():
    lines = (IMAGES / ".hadolint.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*-\s*DL\d+", line):
            assert lines[i - 1].strip().startswith("#") and len(lines[i - 1]) > 20, line


def test_the_ray_base_matches_the_pinned_ray_and_python():
    text = (IMAGES / "base" / "ray.Dockerfile").read_text()
    base = re.search(r"ARG BASE_IMAGE=(\S+)", text).group(1)
    assert base.startswith(f"rayproject/ray:{pin('ray')}-py311-"), base  # a release tag, never nightly/latest
    assert "requirements/train.txt" in text


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(IMAGES)))
def test_labels_user_and_no_secrets(dockerfile):
    text = dockerfile.read_text()
    if dockerfile.name == "Dockerfile" or dockerfile.parent.name != "base":
        for label in ("source", "revision", "version"):
            assert f"org.opencontainers.image.{label}=" in text, label
    users = re.findall(r"^USER (\S+)", text, flags=re.M)
    final_stage = text.rsplit("\nFROM ", 1)[-1]
    final_users = re.findall(r"^USER (\S+)", final_stage, flags=re.M)
    assert (final_users or users or ["inherited"])[-1] not in ("0", "root")
    assert not re.search(r"^(ENV|ARG)\s+\S*(TOKEN|SECRET|PASSWORD|AWS_ACCESS)", text, flags=re.M | re.I)


INSTALLS = re.compile(r"apt-get install|apt install|dpkg -i|pip install|efa_installer")


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: str(p.relative_to(IMAGES)))
def test_the_final_stage_hardens_after_its_last_install(dockerfile):
    """Issue 27 item 5: images/bin/rayfleet-harden (no sudo, no setuid/setgid bit, no file capability) runs
    in every final stage built on a third-party base, and after whatever a final stage installs as root.
    tests/images/test_least_privilege.py scans the built images themselves."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())  # continuation lines joined
    final = re.split(r"^FROM ", text, flags=re.M)[-1]
    runs = [line for line in final.splitlines() if line.startswith("RUN ")]
    third_party = re.match(r"\$\{(BASE_IMAGE|PYTHON_BASE_IMAGE)\}", final)
    hardened = [i for i, run in enumerate(runs) if "rayfleet-harden" in run]
    if third_party:
        assert hardened, f"{dockerfile.name}: the final stage never runs rayfleet-harden"
    for i, run in enumerate(runs):
        if INSTALLS.search(run):
            last = max(INSTALLS.finditer(run), key=lambda m: m.start()).start()
            later = run.rfind("rayfleet-harden") > last or any(h > i for h in hardened)
            assert later, f"{dockerfile.name}: nothing hardens after {run[:100]}"
    assert (ROOT / "images" / "bin" / "rayfleet-harden").stat().st_mode & 0o111


def test_the_build_context_carries_only_what_the_images_copy():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert next(line for line in ignore if not line.startswith("#")) == "**"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    for dockerfile in DOCKERFILES:
        for source in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", dockerfile.read_text(), flags=re.M):
            for path in source.split():
                assert any(path.startswith(a) for a in allowed), f"{dockerfile.name}: COPY {path} is ignored"
