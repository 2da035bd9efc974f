"""The Ray auth token for local clusters: made once per machine, readable by its owner only.

Ray 2.59+ enables token authentication for local clusters. rayfleet turns it on explicitly
(`RAY_AUTH_MODE=token`) and hands every process the token *file* (`RAY_AUTH_TOKEN_PATH`), never the
token itself, so it shows up neither in `ps` output nor in process environments.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_ENV = "RAYFLEET_RAY_TOKEN_FILE"


def token_path() -> Path:
    """Where the token lives: $RAYFLEET_RAY_TOKEN_FILE, else ~/.config/rayfleet/ray-auth-token."""
    if os.environ.get(TOKEN_ENV):
        return Path(os.environ[TOKEN_ENV]).expanduser()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "rayfleet" / "ray-auth-token"


def ensure_token(path: Path | None = None) -> Path:
    """Create the token file (mode 0600, directory 0700) if it does not exist; return its path."""
    path = path or token_path()
    if path.exists():
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise PermissionError(f"{path} is readable by other users (mode {mode:o}); run: chmod 600 {path}")
        return path
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # O_EXCL + 0600 from the start: the token is never readable by others, not even briefly.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32))
    return path


def use_token_auth() -> None:
    """Default this process to token auth with the machine's token file, unless the environment already
    names a token (on ECS the task definition's secret sets RAY_AUTH_TOKEN).

    Must run before `ray` is imported: Ray reads RAY_AUTH_MODE once, at import. Creates no file; the
    cluster start (or `ensure_token`) does."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    if not (os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")):
        os.environ["RAY_AUTH_TOKEN_PATH"] = str(token_path())


def auth_env(path: Path | None = None) -> dict[str, str]:
    """Environment that makes a Ray process (node, driver, CLI) use the token."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(ensure_token(path))}


def read_token(path: Path | None = None) -> str:
    """The token, for HTTP clients of the dashboard and Jobs API. Never print it."""
    return (path or token_path()).read_text().strip()
