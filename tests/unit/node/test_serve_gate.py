"""The serve gate as it runs on ECS: a real process on 127.0.0.1 in front of a stand-in for Serve's proxy (an
aiohttp app on 127.0.0.1 with routes that check nothing, as any application a job deploys). Without the key
nothing reaches the upstream, whatever the path; with it, the request and the answer pass as they are, the
answer streamed; TLS with an operator's certificate, and plain HTTP refused on that port."""

from __future__ import annotations

import asyncio
import datetime
import http.client
import ipaddress
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from rayfleet.core.aws import run_cli
from rayfleet.node.serve import gate as serve_gate
from rayfleet.serve.keys import ENV, ensure_key_file

REPO = Path(__file__).resolve().parents[3]
KEY = "gate-key-" + "k" * 24
AUTH = {"Authorization": f"Bearer {KEY}"}


class Upstream:
    """Serve's proxy, as far as the gate can tell: every route answers anyone; it records what reached it."""

    def __init__(self):
        self.seen: list[dict] = []
        self.release = threading.Event()  # /stream's second chunk waits for it
        self.loop = asyncio.new_event_loop()
        self.port = 0

    async def record(self, request: web.Request) -> dict:
        seen = {
            "method": request.method,
            "raw_path_qs": request.rel_url.raw_path_qs,
            "headers": {k.lower(): v for k, v in request.headers.items()},
            "body": (await request.read()).decode(),
        }
        self.seen.append(seen)
        return seen

    async def echo(self, request: web.Request) -> web.Response:
        seen = await self.record(request)
        headers = [("X-Upstream", "yes"), ("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")]
        return web.json_response(seen, status=int(request.query.get("status", 200)), headers=headers)

    async def open_route(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.Response(text="deployed by a job, checks nothing")

    async def stream(self, request: web.Request) -> web.StreamResponse:
        await self.record(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: one\n\n")
        released = await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 20)
        await response.write(b"data: two\n\n" if released else b"data: timed out\n\n")
        await response.write_eof()
        return response

    def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/echo", self.echo)
        app.router.add_get("/stream", self.stream)
        app.router.add_route("*", r"/{tail:[\s\S]*}", self.open_route)
        ready = threading.Event()

        async def serve():
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = runner.addresses[0][1]
            ready.set()

        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(serve(), self.loop)
        assert ready.wait(10)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Gate:
    """`python -m rayfleet.node.serve.gate` on 127.0.0.1, its log in a file."""

    def __init__(self, tmp: Path, upstream_port: int, extra: list[str], env: dict):
        self.port, self.log = free_port(), tmp / f"gate-{time.monotonic_ns()}.log"
        command = [sys.executable, "-m", "rayfleet.node.serve.gate", "--port", str(self.port)]
        command += ["--upstream-port", str(upstream_port), *extra]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "serve-gate: http" not in self.log.read_text():
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.05)

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(15)
        return self.log.read_text()


def gate_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAYFLEET_SERVE_")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


@pytest.fixture(scope="module")
def upstream():
    server = Upstream()
    server.start()
    yield server
    server.release.set()
    server.stop()


@pytest.fixture(scope="module")
def gate(upstream, tmp_path_factory):
    running = Gate(tmp_path_factory.mktemp("gate"), upstream.port, [], gate_env(**{ENV: KEY}))
    yield running
    running.stop()


def call(port: int, method: str, path: str, headers: dict | None = None, body: bytes | None = None, **kw):
    connection = kw.pop("connection", None) or http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    connection.request(method, path, body=body, headers=headers or {})
    response = connection.getresponse()
    return response.status, dict(response.getheaders()), response.read(), response


@pytest.mark.parametrize(
    "path", ["/", "/x", "/anything/at/all?q=1", "/v1/completions", "/-/routes", "/-/healthz", "/x%0Ay", "//x"]
)
def test_without_the_key_every_path_is_refused_before_serve(gate, upstream, path):
    before = len(upstream.seen)
    for headers in ({}, {"Authorization": "Bearer wrong-key-wrong-key"}, {"Authorization": f"Basic {KEY}"}):
        for method in ("GET", "POST"):
            status, got, body, _ = call(gate.port, method, path, headers, b"{}" if method == "POST" else None)
            assert status == 401 and got.get("WWW-Authenticate") == "Bearer"
            assert json.loads(body)["error"]["code"] == "invalid_api_key"
    assert len(upstream.seen) == before  # nothing reached Serve


def test_an_unauthenticated_route_on_the_serve_port_is_refused(gate, upstream):
    """Finding 8: an application any token holder deploys (`route_prefix="/x"`, no check of its own) answers
    anyone on Serve's proxy, but on the Serve port only with the key."""
    assert call(upstream.port, "GET", "/x")[0] == 200  # Serve's proxy itself: open
    assert call(gate.port, "GET", "/x")[0] == 401
    status, _, body, _ = call(gate.port, "GET", "/x", AUTH)
    assert status == 200 and body == b"deployed by a job, checks nothing"


def test_with_the_key_the_request_and_the_answer_pass_as_they_are(gate, upstream):
    body = json.dumps({"prompt": "ROMEO:", "max_tokens": 4}).encode()
    headers = {**AUTH, "Content-Type": "application/json", "X-Custom": "kept", "Connection": "keep-alive, X-Drop"}
    headers["X-Drop"] = "hop-by-hop, named by Connection"
    status, got, answer, response = call(gate.port, "POST", "/echo?status=201&a=1&b=two%2Fthree", headers, body)
    assert status == 201 and got["X-Upstream"] == "yes"
    assert response.headers.get_all("Set-Cookie") == ["a=1", "b=2"]
    seen = json.loads(answer)
    assert seen["method"] == "POST" and seen["raw_path_qs"] == "/echo?status=201&a=1&b=two%2Fthree"
    assert seen["body"] == body.decode() and seen["headers"]["content-type"] == "application/json"
    assert seen["headers"]["x-custom"] == "kept" and "x-drop" not in seen["headers"]
    assert "authorization" not in seen["headers"]  # the key stops at the gate
    assert call(gate.port, "DELETE", "/echo", AUTH)[0] == 200 and upstream.seen[-1]["method"] == "DELETE"
    assert call(gate.port, "PUT", "/echo", AUTH, b"raw")[0] == 200  # no Content-Type, Accept or User-Agent added
    assert {"content-type", "accept", "user-agent"}.isdisjoint(upstream.seen[-1]["headers"])
    assert upstream.seen[-1]["headers"]["accept-encoding"] == "identity"  # what http.client sent
    assert call(gate.port, "GET", "/odd%0Apath", AUTH)[0] == 200 and upstream.seen[-1]["raw_path_qs"] == "/odd%0Apath"


def test_a_streamed_answer_arrives_chunk_by_chunk(gate, upstream):
    """The first event arrives while the upstream still holds back the second: LLM tokens stream through."""
    upstream.release.clear()
    connection = http.client.HTTPConnection("127.0.0.1", gate.port, timeout=20)
    connection.request("GET", "/stream", headers=AUTH)
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    assert response.readline() == b"data: one\n"  # before the upstream has written "two"
    assert not upstream.release.is_set()
    upstream.release.set()
    assert response.read() == b"\ndata: two\n\n"


def test_refusals_are_logged_one_line_each_without_the_key(upstream, tmp_path):
    gate = Gate(tmp_path, upstream.port, [], gate_env(**{ENV: KEY}))
    try:
        call(gate.port, "GET", "/x?token=abc", {"Authorization": f"Bearer {KEY}-almost"})
        call(gate.port, "GET", "/x%0aserve-gate:%20forged", {})
        call(gate.port, "GET", "/x", AUTH)
    finally:
        log = gate.stop()
    refused = [line for line in log.splitlines() if "refused" in line or "forged" in line]
    assert refused == [
        "serve-gate: refused GET /x from 127.0.0.1: no or wrong API key",
        "serve-gate: refused GET /x%0aserve-gate:%20forged from 127.0.0.1: no or wrong API key",  # one line
    ]
    assert KEY not in log and "abc" not in log


def self_signed(folder: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "serve-gate test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def test_tls_from_the_operators_certificate_and_no_plain_http(upstream, tmp_path):
    """The certificate and key as ECS secrets inject them (PEM text in the environment), the API key from a
    private file: HTTPS with the key passes, without it 401; plain HTTP on that port gets no answer."""
    cert, key = self_signed(tmp_path)
    key_file = ensure_key_file(tmp_path / "serve" / "api_key")
    api_key = key_file.read_text().strip()
    env = gate_env(RAYFLEET_SERVE_TLS_CERT=cert.read_text(), RAYFLEET_SERVE_TLS_KEY=key.read_text())
    gate = Gate(tmp_path, upstream.port, ["--key-file", str(key_file)], env)
    try:
        trusted = ssl.create_default_context(cafile=str(cert))

        def tls():
            return http.client.HTTPSConnection("127.0.0.1", gate.port, timeout=20, context=trusted)

        status, _, body, _ = call(gate.port, "GET", "/x", {"Authorization": f"Bearer {api_key}"}, connection=tls())
        assert status == 200 and body == b"deployed by a job, checks nothing"
        assert call(gate.port, "GET", "/x", connection=tls())[0] == 401
        with pytest.raises((http.client.HTTPException, OSError)):
            call(gate.port, "GET", "/x", {"Authorization": f"Bearer {api_key}"})
    finally:
        log = gate.stop()
    assert f"serve-gate: https://127.0.0.1:{gate.port} -> http://127.0.0.1:{upstream.port}" in log


def test_serve_not_running_is_a_502_after_the_key(tmp_path):
    async def scenario():
        app = serve_gate.make_app(KEY, f"http://127.0.0.1:{free_port()}")  # nothing listens there
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            refused = await client.get("/v1/models")
            down = await client.get("/v1/models", headers=AUTH)
            return refused.status, down.status, (await down.json())["error"]["code"]

    assert asyncio.run(scenario()) == (401, 502, "no_upstream")


@pytest.mark.parametrize(
    ("argv", "env", "code", "words"),
    [
        (["--port", "18000"], {ENV: KEY}, 2, "would forward to itself"),
        (["--port", "0"], {ENV: KEY}, 2, "--port must be 1-65535"),
        (["--port", "8000", "--tls-cert", "c.pem"], {ENV: KEY}, 2, "--tls-cert and --tls-key go together"),
        (["--port", "8000"], {ENV: KEY, "RAYFLEET_SERVE_TLS_CERT": "x"}, 2, "go together"),
        (["--port", "8000"], {ENV: KEY, "RAYFLEET_SERVE_TLS_CERT": "x", "RAYFLEET_SERVE_TLS_KEY": "y"}, 2, "no usable"),
        (["--port", "8000"], {}, 1, "no API key of at least 16 characters"),
    ],
)
def test_bad_flags_certificates_and_no_key_are_one_line(monkeypatch, capsys, argv, env, code, words):
    for name in (ENV, serve_gate.TLS_CERT_ENV, serve_gate.TLS_KEY_ENV):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        got = run_cli(serve_gate.main, argv)
    except SystemExit as exc:  # argparse's usage errors
        got = exc.code
    err = capsys.readouterr().err
    (line,) = [line for line in err.splitlines() if "error:" in line]  # argparse puts its usage above
    assert got == code and words in line and KEY not in err
