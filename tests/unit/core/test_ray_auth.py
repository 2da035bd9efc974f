"""The Ray token file: private, stable, and refused when it is a link, not the user's, or readable by others."""

from __future__ import annotations

import os
import stat

import pytest

from rayfleet.core import ray_auth


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


def test_a_token_file_that_is_a_symlink_is_refused_in_one_line(tmp_path, monkeypatch):
    """Issue 27: the token file was opened through a link, so whoever could write its directory chose the
    token the cluster and its clients used. Links in the directories above it still work."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("y" * 64)
    elsewhere.chmod(0o600)
    link = tmp_path / "token"
    link.symlink_to(elsewhere)
    monkeypatch.setenv(ray_auth.TOKEN_ENV, str(link))
    for use in (ray_auth.ensure_token, ray_auth.read_token, ray_auth.auth_env):
        with pytest.raises(PermissionError) as err:
            use()
        assert str(err.value) == f"{link} is a symbolic link; the Ray token must be a file of its own"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "would-be-created")
    with pytest.raises(PermissionError, match="is a symbolic link"):
        ray_auth.ensure_token(dangling)
    assert not (tmp_path / "would-be-created").exists()  # not created through the link either
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "via").symlink_to(tmp_path / "real")
    assert ray_auth.ensure_token(tmp_path / "via" / "token") == tmp_path / "via" / "token"


def test_a_token_path_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "token"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(PermissionError, match="is not a regular file"):
        ray_auth.read_token(fifo)


def test_a_token_file_readable_by_others_is_not_read_either(tmp_path):
    (tmp_path / "token").write_text("x" * 64)
    (tmp_path / "token").chmod(0o640)
    with pytest.raises(PermissionError, match="mode 640"):
        ray_auth.read_token(tmp_path / "token")


def test_a_token_file_of_another_user_is_refused(tmp_path, monkeypatch):
    (tmp_path / "token").write_text("x" * 64)
    (tmp_path / "token").chmod(0o600)
    uid = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: uid + 1)  # as if another user ran it
    with pytest.raises(PermissionError, match="belongs to another user"):
        ray_auth.ensure_token(tmp_path / "token")
