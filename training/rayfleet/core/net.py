"""Whether the network answers: the short probe `make data`, `make text-data` and `make build` take before they
download, so that offline they say so in one line and fall back instead of waiting out a download's timeout."""

from __future__ import annotations

import socket
from urllib.parse import urlsplit

PROBE_S = 3.0  # how long the probe waits for a connection


def reachable(url: str, timeout_s: float = PROBE_S) -> bool:
    """Whether a connection to `url`'s host opens within `timeout_s`."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            return True
    except OSError:
        return False
