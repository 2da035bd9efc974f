"""The rehearsal's GCS store (gcs_store enabled): ElastiCache for Valkey as the head task reaches it.

The head's task definition names the store as Terraform renders it: RAY_REDIS_ADDRESS=rediss://<primary
endpoint>:<port>, its certificate checked against RAY_REDIS_CA_CERT (the image's CA bundle, which holds
Amazon's CA), its AUTH token from the task's secrets. Here:

  * a redis-server of this host (the Debian package), TLS only, with that AUTH token (the secret's value in
    moto, seeded as `make deploy` sets it) and no persistence, on 127.0.0.1 at a free port;
  * reached by the containers at the endpoint's name, which every task's pod resolves to the rehearsal
    network's gateway (`--add-host`), where a byte forwarder (a process of its own) listens on the store's
    port and passes the TLS stream through to redis-server untouched;
  * its certificate, for the endpoint's name, signed by a CA made for this rehearsal; that CA is added to a
    copy of the image's own bundle, mounted read-only at RAY_REDIS_CA_CERT in the containers that name it
    (AWS signs ElastiCache's certificates with a CA the image already trusts).

Not modelled: Multi-AZ failover, the AUTH token's ROTATE window, encryption at rest, the security groups
(only the head may reach the store on ECS; here any container of the rehearsal could).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

from tools.rehearsal.cloud import listen

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def store_of(picture: dict) -> tuple[str, int, str] | None:
    """(endpoint name, port, CA bundle path in the container) when the head uses a GCS store, else None."""
    for container in picture["taskDefinitions"]["head"]["containerDefinitions"]:
        env = {e["name"]: e["value"] for e in container.get("environment", [])}
        if env.get("RAY_REDIS_ADDRESS", "").startswith("rediss://"):
            parsed = urlparse(env["RAY_REDIS_ADDRESS"])
            return parsed.hostname, parsed.port or 6379, env.get("RAY_REDIS_CA_CERT", str(SYSTEM_BUNDLE))
    return None


def certificates(directory: Path, name: str) -> dict[str, Path]:
    """A CA of this rehearsal and the store's certificate for `name`, signed by it; and the bundle."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "rayfleet rehearsal CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    pem = serialization.Encoding.PEM
    paths = {n: directory / f"{n}.pem" for n in ("ca", "cert", "key", "bundle")}
    paths["ca"].write_bytes(ca.public_bytes(pem))
    paths["cert"].write_bytes(cert.public_bytes(pem))
    private = serialization.PrivateFormat.TraditionalOpenSSL
    paths["key"].write_bytes(key.private_bytes(pem, private, serialization.NoEncryption()))
    paths["key"].chmod(0o600)
    system = SYSTEM_BUNDLE.read_bytes() if SYSTEM_BUNDLE.is_file() else b""
    paths["bundle"].write_bytes(system + b"\n" + ca.public_bytes(pem))
    paths["bundle"].chmod(0o644)
    return paths


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class Forwarder:
    """host:port (the gateway) to 127.0.0.1:target, byte for byte, a thread pair per connection."""

    def __init__(self, host: str, port: int, target: int):
        self.sock, self.target, self.closed = listen(host, port), target, False

    def serve(self) -> None:
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


class GcsStore:
    def __init__(self, name: str, port: int, bundle_at: str, gateway: str, token: str, directory: Path):
        self.name, self.port, self.bundle_at, self.gateway = name, port, bundle_at, gateway
        self.paths = certificates(directory, name)
        self.local_port = _free_port()
        self.process = subprocess.Popen(
            [
                _redis_server(),
                "--port", "0",
                "--tls-port", str(self.local_port),
                "--bind", "127.0.0.1",
                "--tls-cert-file", str(self.paths["cert"]),
                "--tls-key-file", str(self.paths["key"]),
                "--tls-ca-cert-file", str(self.paths["ca"]),
                "--tls-auth-clients", "no",  # ElastiCache asks no client certificate either
                "--requirepass", token,
                "--save", "",
                "--appendonly", "no",
                "--dir", str(directory),
            ],
            stdout=open(directory / "redis.log", "w"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            start_new_session=True,  # not the terminal's Ctrl-C: the rehearsal's teardown stops it
            preexec_fn=_die_with_parent,  # a rehearsal killed outright leaves no store running
        )  # fmt: skip
        self._wait()
        # A process of its own: in the rehearsal's, the GCS's traffic would contend for one GIL with moto's.
        self.forwarder = subprocess.Popen(
            [sys.executable, "-m", "tools.rehearsal.store", gateway, str(port), str(self.local_port)],
            stdout=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )

    def _wait(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited {self.process.returncode}: see {self.paths['ca'].parent}")
            try:
                socket.create_connection(("127.0.0.1", self.local_port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("redis-server did not listen within 30 s")

    @property
    def hosts(self) -> dict[str, str]:
        return {self.name: self.gateway}

    @property
    def mounts(self) -> dict[str, str]:
        """Container path -> host file, for the containers whose environment names RAY_REDIS_CA_CERT."""
        return {self.bundle_at: str(self.paths["bundle"])}

    def line(self) -> str:
        return (
            f"GCS store: redis-server {self.local_port} (TLS, AUTH from the secret) as {self.name}:{self.port}, "
            f"through {self.gateway}:{self.port}; its CA added to the bundle at {self.bundle_at}"
        )

    def stop(self) -> None:
        for process in (self.forwarder, self.process):
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    process.kill()


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _redis_server() -> str:
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else None
    )
    if not found:
        raise RuntimeError("gcs_store needs redis-server on this host: apt-get install redis-server")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


if __name__ == "__main__":  # the forwarder's own process: python -m tools.rehearsal.store HOST PORT TARGET
    Forwarder(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])).serve()
