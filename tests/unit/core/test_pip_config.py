"""pip's configuration as `make setup`'s uv and `make build`'s podman builds get it (rayfleet/core/pip_config.py,
tools/uv_install.py): read from `pip config list` (here a stand-in for pip that prints what pip prints),
with pip's precedence, and turned into uv's flags. That uv then installs the same versions pip would is
checked where it runs: `make setup` before every CI run, and the image tests import the pinned versions."""

from __future__ import annotations

import stat
from pathlib import Path

from rayfleet.core import pip_config
from tools import uv_install

LISTED = """\
:env:.cert='/etc/ssl/certs/ca-certificates.crt'
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/other'
install.timeout='60'
"""


def fake_pip(tmp_path: Path, listed: str) -> str:
    """A "python" whose `-m pip config list` prints `listed`, as pip does."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{listed}EOF\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_the_environment_wins_over_the_files_as_in_pip(tmp_path):
    settings = pip_config.settings(fake_pip(tmp_path, LISTED))
    assert settings["find-links"] == "/opt/wheels"  # PIP_FIND_LINKS over global.find-links
    assert settings["extra-index-url"] == "file:///opt/pypi/simple file:///opt/pypi-more/simple"
    assert settings["constraint"] == "/etc/xdg/pip/constraints.txt" and settings["timeout"] == "60"
    assert pip_config.settings(fake_pip(tmp_path, "")) == {}


def test_uv_gets_the_same_sources_and_pips_rule_for_several_indexes(tmp_path):
    settings = pip_config.settings(fake_pip(tmp_path, LISTED))
    flags = pip_config.uv_flags(settings)
    assert flags == [
        "--index-strategy",
        "unsafe-best-match",
        "--extra-index-url",
        "file:///opt/pypi/simple",
        "--extra-index-url",
        "file:///opt/pypi-more/simple",
        "--find-links",
        "/opt/wheels",
        "--constraint",
        "/etc/xdg/pip/constraints.txt",
    ]
    assert pip_config.uv_flags({"index-url": "https://mirror/simple", "no-index": "true"})[2:] == [
        "--index-url",
        "https://mirror/simple",
        "--no-index",
    ]
    command = uv_install.uv_command("/v/bin/python", ["-e", ".[dev]"], settings)
    assert command[:6] == [str(uv_install.UV), "pip", "install", "--python", "/v/bin/python", "--compile-bytecode"]
    assert command[-2:] == ["-e", ".[dev]"]
    env = uv_install.uv_environment(settings)
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt" and env["UV_HTTP_TIMEOUT"] == "180"


def test_without_uv_the_installer_says_how_to_get_it_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(uv_install, "UV", tmp_path / "uv")
    assert uv_install.main(["/v/bin/python", "-e", "."]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "requirements/uv.txt" in err
