"""The Ray token file: private, stable, and refused when others can read it."""

from __future__ import annotations

import stat

import pytest

from training.core import ray_auth


def test_token_file_is_private_and_stable(tmp_path, monkeypatch):
    monkeypatch.setenv(ray_auth.TOKEN_ENV, str(tmp_path / "cfg" / "token"))
    path = ray_auth.ensure_token()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = ray_auth.read_token()
    assert len(token) == 64 and ray_auth.ensure_token() == path and ray_auth.read_token() == token
    env = ray_auth.auth_env()
    assert env == {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(path)}
    assert token not in "".join(env.values())  # processes get the path, never the token


def test_token_file_readable_by_others_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(ray_auth.TOKEN_ENV, str(tmp_path / "token"))
    (tmp_path / "token").write_text("x" * 64)
    (tmp_path / "token").chmod(0o644)
    with pytest.raises(PermissionError, match="chmod 600"):
        ray_auth.ensure_token()
