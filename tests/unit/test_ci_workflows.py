"""The GitHub workflows: third-party actions pinned by commit, and only the main-branch push job may assume
the AWS role (id-token: write)."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / ".github" / "workflows").glob("*.yml"))


def _steps(workflow: dict):
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(path):
    for job, step in _steps(yaml.safe_load(path.read_text())):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), f"{path.name} {job}: {step['uses']}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_only_the_push_job_on_main_gets_an_oidc_token(path):
    workflow = yaml.safe_load(path.read_text())
    assert "id-token" not in (workflow.get("permissions") or {}), f"{path.name}: id-token for every job"
    for name, job in workflow["jobs"].items():
        if (job.get("permissions") or {}).get("id-token") == "write":
            assert job.get("if") == "github.ref == 'refs/heads/main' && github.event_name == 'push'", name
            assert job.get("needs"), f"{path.name} {name}: pushes without the tests having passed"


def test_images_are_pushed_with_the_tag_deploy_uses():
    text = (WORKFLOWS[0].parent / "images.yml").read_text()
    assert "github.sha" not in text  # make's IMAGE_TAG (12 characters of the commit), as rayfleet deploy uses


# --- `make test` does its own set-up (tools/system_deps.py); .ci/run is `make test` ------------------------------
ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(
    r"error: make test needs the system packages (.+); install them \(Debian/Ubuntu: (.+)\) and run make test again"
)


def _executables(folder: Path, names, body: str = "#!/bin/sh\nexit 0\n") -> None:
    for name in names:
        (folder / name).write_text(body)
        (folder / name).chmod(0o755)


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """PATH is one empty folder (no apt-get, no sudo, none of the packages); the keyring a file not there."""
    from tools import system_deps

    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setitem(system_deps.PACKAGES, "debian-archive-keyring", str(tmp_path / "no-keyring.gpg"))
    return folder


def test_the_system_check_names_exactly_the_missing_packages_in_one_line_and_exits_2(bare_path, capsys):
    from tools import system_deps

    _executables(bare_path, ["podman", "runc", "newuidmap"])  # podman, runc and uidmap are installed
    assert system_deps.main() == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    named, command = LINE.fullmatch(lines[0]).groups()
    assert named.split(", ") == ["buildah", "debootstrap", "debian-archive-keyring", "redis-server"]
    assert command.endswith("apt-get install -y buildah debootstrap debian-archive-keyring redis-server")


def test_the_system_check_runs_before_venv_exists_and_is_silent_when_all_is_there(tmp_path):
    """As `make test` runs it: the standard library only, a PATH without the packages (exit 2, one line), then
    with every command there (exit 0, nothing printed)."""
    from tools import system_deps

    folder = tmp_path / "bin"
    folder.mkdir()
    run = [sys.executable, "-S", "-m", "tools.system_deps"]  # -S: no site-packages, as before .venv exists
    missing = subprocess.run(run, cwd=ROOT, env={"PATH": str(folder)}, capture_output=True, text=True, timeout=60)
    keyring_here = Path(system_deps.PACKAGES["debian-archive-keyring"]).is_file()
    expected = [p for p in system_deps.PACKAGES if p != "debian-archive-keyring" or not keyring_here]
    assert missing.returncode == 2 and missing.stdout == ""
    assert LINE.fullmatch(missing.stderr.strip()).group(1).split(", ") == expected
    _executables(folder, [probe for probe in system_deps.PACKAGES.values() if not probe.startswith("/")])
    if keyring_here:
        found = subprocess.run(run, cwd=ROOT, env={"PATH": str(folder)}, capture_output=True, text=True, timeout=60)
        assert (found.returncode, found.stdout, found.stderr) == (0, "", "")


FAKE_APT = """#!{python}
import json, os, pathlib, sys
log = pathlib.Path({log!r})
with log.open("a") as out:
    out.write(json.dumps([os.environ.get("DEBIAN_FRONTEND"), *sys.argv[1:]]) + "\\n")
if sys.argv[1] == "install":
    if {fail}:
        sys.exit(100)
    for package in sys.argv[4:]:
        probe = pathlib.Path({probes!r}[package])
        probe = probe if probe.is_absolute() else pathlib.Path({folder!r}) / probe
        probe.write_text("#!/bin/sh\\n")
        probe.chmod(0o755)
"""
# sudo as CI's: runs the command as root (here: as the test's user), -n: never asks for a password
FAKE_SUDO = """#!{python}
import os, pathlib, sys
pathlib.Path({log!r}).open("a").write(" ".join(sys.argv[1:]) + "\\n")
args = sys.argv[2:] if sys.argv[1] == "-n" else sys.argv[1:]
os.execvp(args[0], args)
"""


@pytest.mark.parametrize("apt_fails", [False, True], ids=["installs", "apt-get-fails"])
def test_a_user_without_root_gets_the_missing_packages_through_sudo_apt_get(bare_path, monkeypatch, capsys, apt_fails):
    from tools import system_deps

    _executables(bare_path, ["podman", "buildah", "runc", "newuidmap"])
    (bare_path / "env").symlink_to(shutil.which("env", path=os.defpath + ":/usr/bin:/bin"))
    apt_log, sudo_log = bare_path.parent / "apt.log", bare_path.parent / "sudo.log"
    fill = {"python": sys.executable, "folder": str(bare_path), "probes": dict(system_deps.PACKAGES)}
    _executables(bare_path, ["apt-get"], FAKE_APT.format(**fill, log=str(apt_log), fail=apt_fails))
    _executables(bare_path, ["sudo"], FAKE_SUDO.format(**fill, log=str(sudo_log)))
    monkeypatch.setattr(system_deps.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(system_deps.sys, "stdin", io.StringIO())  # no terminal: sudo must not prompt

    code = system_deps.main()

    wanted = ["debootstrap", "debian-archive-keyring", "redis-server"]
    install = ["noninteractive", "install", "-y", "-q", *wanted]
    calls = [json.loads(line) for line in apt_log.read_text().splitlines()]
    assert calls == [["noninteractive", "update", "-q"], install]
    assert all(
        line.startswith("-n env DEBIAN_FRONTEND=noninteractive apt-get ") for line in sudo_log.read_text().splitlines()
    )
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "make test: installing the system packages it needs: " + " ".join(wanted)
    if apt_fails:
        assert code == 2 and len(err) == 2
        assert LINE.fullmatch(err[1]).groups() == (", ".join(wanted), "sudo apt-get install -y " + " ".join(wanted))
    else:
        assert code == 0 and len(err) == 1 and system_deps.missing() == []


def _script_commands(path: Path) -> list[str]:
    """The shell commands of a script: continued lines joined, comments and blank lines left out."""
    text = path.read_text().replace("\\\n", " ")
    return [
        line.split(" #", 1)[0].strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_ci_runs_make_test_and_nothing_else():
    commands = _script_commands(ROOT / ".ci" / "run")
    assert commands[:2] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."'], commands
    assert len(commands) == 3, f".ci/run does more than make test: {commands[2:-1]}"
    assert re.fullmatch(r"RAYFLEET_REQUIRE_IMAGES=1 (exec )?make test PYTEST_ARGS=\"[^\"]*\"", commands[2]), commands[2]


def _make_dry_run(target: str) -> list[str]:
    done = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.splitlines()


def test_make_test_checks_the_system_packages_before_anything_else_and_test_quick_does_not():
    lines = _make_dry_run("test")
    check = [i for i, line in enumerate(lines) if line.endswith("-m tools.system_deps")]
    early = [i for i, line in enumerate(lines) if "-m tests.images.build --early" in line]
    pytest_run = [i for i, line in enumerate(lines) if " -m pytest " in line]
    assert len(check) == len(early) == len(pytest_run) == 1, lines
    assert check[0] < early[0] < pytest_run[0]
    assert not any("system_deps" in line for line in _make_dry_run("test-quick"))
