"""The API key every request carries (`Authorization: Bearer <key>`), and who checks it.

On ECS the serve gate checks it (rayfleet/node/serve/gate.py): a container of its own in the head's task
that holds the Serve port, checks every request with `matches` and forwards it to Serve's proxy on 127.0.0.1.
ECS injects the key (RAYFLEET_SERVE_API_KEY, from Secrets Manager) into that container only, so no Ray
process, and with it no job, holds it; the replicas are `gated` and check nothing. On the local cluster the
replica checks it, read from a file only its owner can read (.rayfleet/serve/api_key, made by `make serve`)
or from RAYFLEET_SERVE_API_KEY. Only where to find it goes through Ray's application config, never the key:
Ray's dashboard shows that config to anyone with the cluster token.
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

ENV = "RAYFLEET_SERVE_API_KEY"
MIN_LENGTH = 16
REFUSED = "missing or wrong API key: send `Authorization: Bearer <key>`"  # the same for both: no hint which


class KeyMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class KeySource:
    file: str | None = None  # used when the environment has no key

    def read(self) -> str:
        key = os.environ.get(ENV, "").strip()
        if not key and self.file:
            path = Path(self.file)
            if not path.is_file():
                raise KeyMissing(f"the API key file {path} does not exist")
            if path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise KeyMissing(f"the API key file {path} is readable by others: chmod 600 it")
            key = path.read_text().strip()
        if len(key) < MIN_LENGTH:
            where = f"{ENV} or {self.file}" if self.file else ENV
            raise KeyMissing(
                f"no API key of at least {MIN_LENGTH} characters in {where}: refusing to serve without one"
            )
        return key


def replica_key(file: str | None, gated: bool) -> KeySource | None:
    """What a replica checks requests against: nothing when `gated` (the serve gate checks every request in
    front of Serve, and the deploy verb bound Serve's proxy to 127.0.0.1 behind it), else the key, read now:
    a replica without one never starts, so nothing is ever served openly by accident."""
    if gated:
        return None
    source = KeySource(file)
    source.read()
    return source


def matches(header: str | None, key: str) -> bool:
    """Constant-time comparison of an `Authorization: Bearer <key>` header with the key."""
    scheme, _, given = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), key.encode())


def ensure_key_file(path: Path) -> Path:
    """The local cluster's key: made once (0600, in a 0700 folder), then reused."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(32) + "\n")
    return path
