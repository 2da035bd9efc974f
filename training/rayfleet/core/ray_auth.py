"""The Ray auth token for local clusters: made once per machine, readable by its owner only.

Ray 2.59+ enables token authentication for local clusters. rayfleet turns it on explicitly
(`RAY_AUTH_MODE=token`) and hands every process the token *file* (`RAY_AUTH_TOKEN_PATH`), never the
token itself, so it shows up neither in `ps` output nor in process environments.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from pathlib import Path

TOKEN_ENV = "RAYFLEET_RAY_TOKEN_FILE"


def token_path() -> Path:
    """Where the token lives: $RAYFLEET_RAY_TOKEN_FILE, else ~/.config/rayfleet/ray-auth-token."""
    if os.environ.get(TOKEN_ENV):
        return Path(os.environ[TOKEN_ENV]).expanduser()
    config_home = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config_home / "rayfleet" / "ray-auth-token"


def _open_private(path: Path) -> int:
    """Open the token file for reading, refusing what would hand Ray someone else's token or leak ours: a
    symbolic link (O_NOFOLLOW: whoever can write its directory could point it at a file of their choosing),
    anything but a regular file, a file of another user, or one that group or others may access. Links in
    the directories above it are the user's own business and still work."""
    try:
        # O_NONBLOCK: a FIFO planted in its place would block the open; it is refused below instead.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise PermissionError(f"{path} is a symbolic link; the Ray token must be a file of its own") from None
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_uid != os.getuid():
        problem = "belongs to another user"
    elif info.st_mode & 0o077:
        problem = f"is readable by other users (mode {stat.S_IMODE(info.st_mode):o}); run: chmod 600 {path}"
    else:
        return fd
    os.close(fd)
    raise PermissionError(f"{path} {problem}")


def ensure_token(path: Path | None = None) -> Path:
    """Create the token file (mode 0600, directory 0700) if it does not exist; return its path. An existing
    one must pass `_open_private`."""
    path = path or token_path()
    try:
        os.close(_open_private(path))
        return path
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # O_EXCL + 0600 from the start: the token is never readable by others, not even briefly; O_EXCL also
    # fails on a link planted in the meantime rather than following it.
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
    with os.fdopen(_open_private(path or token_path())) as f:
        return f.read().strip()
