"""The local GCS store: a real redis-server on 127.0.0.1 that answers only with its password, its secrets in
files of the user's own. (That Ray's head keeps its GCS there and a replaced head takes the cluster back:
tests/integration/test_ddp_starts_its_own_cluster.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
from pathlib import Path

import pytest

from rayfleet.local import gcs_store, host, nodes
from rayfleet.local.cluster import ClusterSpec

pytestmark = pytest.mark.skipif(
    not shutil.which("redis-server"), reason="needs redis-server (make test installs it: tools/system_deps.py)"
)


def ask(address: str, *words: str) -> bytes:
    """One Redis command in RESP, its one-line answer."""
    host_, port = address.rsplit(":", 1)
    request = f"*{len(words)}\r\n" + "".join(f"${len(w)}\r\n{w}\r\n" for w in words)
    with socket.create_connection((host_, int(port)), timeout=5) as s:
        s.sendall(request.encode())
        return s.recv(200).split(b"\r\n")[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_store_answers_on_loopback_only_with_its_password(tmp_path):
    directory = host.private_dir(tmp_path / "state")
    store, pid = gcs_store.start(free_port(), directory, dict(os.environ), tmp_path)
    try:
        assert store.address.startswith("127.0.0.1:")
        assert ask(store.address, "PING").startswith(b"-NOAUTH")
        assert ask(store.address, "AUTH", "wrong").startswith(b"-WRONGPASS")
        assert ask(store.address, "AUTH", store.password()) == b"+OK"
        for name in ("gcs-store.password", "gcs-store.conf"):
            assert stat.S_IMODE((directory / name).stat().st_mode) == 0o600
        listening = Path(f"/proc/{pid}/net/tcp").read_text()  # the listening socket's local address: 127.0.0.1
        port_hex = f"{int(store.address.rsplit(':', 1)[1]):04X}"
        assert f"0100007F:{port_hex} 00000000:0000 0A" in listening
        head = nodes.head_command(ClusterSpec(), "/tmp/ray-x", 10**9, store.password())
        assert f"--redis-password={store.password()}" in head
        assert gcs_store.head_env(store, "c1") == {
            "RAY_REDIS_ADDRESS": store.address,
            "RAY_external_storage_namespace": "c1",
        }
    finally:
        os.kill(pid, signal.SIGKILL)


def test_without_redis_server_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(host.ClusterError, match="apt-get install redis-server"):
        gcs_store.redis_server()
