"""The serve gate: the API key on every route of the Serve port, in front of Ray Serve's own proxy.

    python -m rayfleet.node.serve.gate --port 8000 [--host 0.0.0.0] [--upstream-port 18000]
                                           [--key-file FILE] [--tls-cert FILE --tls-key FILE]

Serve's proxy has no authentication and serves whatever application any holder of the Ray token deploys
(`serve.run(..., route_prefix="/x")` from any job), so it never faces the network: on ECS it listens on
127.0.0.1:<GATED_PROXY_PORT> in the head's task (rayfleet/node/serve/control.py), and this gate, a container of
its own in that task (the head image, this module as its entry point), holds the Serve port. Every request,
whatever its path, needs `Authorization: Bearer <key>` (constant-time, rayfleet/serve/keys.py); a refused
one gets a 401, is logged as one line (never the key) and never reaches Serve. An accepted one is forwarded
as it came (method, path, query, headers, body streamed) without its Authorization header, and the answer
streams back as Serve sends it, so LLM tokens arrive as they are generated.

The key comes from RAYFLEET_SERVE_API_KEY (ECS injects the secret into this container only: no Ray process,
and with it no job, holds it) or from --key-file (mode 0600). TLS, when the operator gives a certificate:
--tls-cert/--tls-key files, or the PEM text in RAYFLEET_SERVE_TLS_CERT and RAYFLEET_SERVE_TLS_KEY (ECS secrets
are strings), loaded through a private temporary file that is removed at once. Exit 2 for bad flags or
certificates, 1 without a key.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from aiohttp import ClientError, ClientSession, ClientTimeout, TCPConnector, hdrs, web
from yarl import URL

from rayfleet.core.aws import run_cli
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.serve.config import GATED_PROXY_PORT
from rayfleet.serve.keys import REFUSED, KeyMissing, KeySource, matches

TLS_CERT_ENV = "RAYFLEET_SERVE_TLS_CERT"
TLS_KEY_ENV = "RAYFLEET_SERVE_TLS_KEY"
# Meant for one connection (RFC 9110 section 7.6.1), the gate's own business, or not Serve's to see.
NOT_FORWARDED = {
    name.lower()
    for name in (
        hdrs.CONNECTION,
        hdrs.KEEP_ALIVE,
        hdrs.PROXY_AUTHENTICATE,
        hdrs.PROXY_AUTHORIZATION,
        hdrs.TE,
        hdrs.TRAILER,
        hdrs.TRANSFER_ENCODING,
        hdrs.UPGRADE,
        hdrs.EXPECT,
        hdrs.HOST,
        hdrs.AUTHORIZATION,
    )
}
SESSION = web.AppKey("session", ClientSession)


def say(message: str) -> None:
    print(f"serve-gate: {message}", flush=True)


def forwarded(headers) -> list[tuple[str, str]]:
    """The headers to pass on: every one but the hop-by-hop ones, those a Connection header names, and the key."""
    named = {token.strip().lower() for value in headers.getall(hdrs.CONNECTION, []) for token in value.split(",")}
    return [(name, value) for name, value in headers.items() if name.lower() not in NOT_FORWARDED | named]


def logged(request: web.Request) -> str:
    """The path as sent, percent-encoded (no line breaks in the log), without the query (it may hold secrets)."""
    return request.rel_url.raw_path[:200]


def refused() -> web.Response:
    # OpenAI's error shape, as the replicas answer, so OpenAI clients show it; the same for no key and a wrong one.
    body = {"error": {"message": REFUSED, "type": "authentication_error", "code": "invalid_api_key"}}
    return web.json_response(body, status=401, headers={hdrs.WWW_AUTHENTICATE: "Bearer"})


def make_app(key: str, upstream: str) -> web.Application:
    async def session(app: web.Application):
        # No pool limit (Serve's proxy queues and sheds load itself); no total timeout (a long generation
        # streams for minutes); bytes passed through as they are (compressed stays compressed), and no header
        # the caller did not send (aiohttp would add these four).
        connector = TCPConnector(limit=0)
        timeout = ClientTimeout(total=None, sock_connect=10)
        own = (hdrs.ACCEPT, hdrs.ACCEPT_ENCODING, hdrs.USER_AGENT, hdrs.CONTENT_TYPE)
        options = {"connector": connector, "timeout": timeout, "auto_decompress": False, "skip_auto_headers": own}
        async with ClientSession(**options) as client:
            app[SESSION] = client
            yield

    @web.middleware
    async def gate(request: web.Request, handler) -> web.StreamResponse:
        # A middleware, not the route: it runs for every request, one that matches no route included.
        if not matches(request.headers.get(hdrs.AUTHORIZATION), key):
            say(f"refused {request.method} {logged(request)} from {request.remote}: no or wrong API key")
            return refused()
        return await handler(request)

    async def forward(request: web.Request) -> web.StreamResponse:
        try:
            reply = await request.app[SESSION].request(
                request.method,
                URL(upstream + request.rel_url.raw_path_qs, encoded=True),  # the path's bytes as they came
                headers=forwarded(request.headers),
                data=request.content if request.body_exists else None,
                allow_redirects=False,
            )
        except (ClientError, OSError) as exc:
            say(f"{request.method} {logged(request)}: Serve's proxy did not answer: {type(exc).__name__}")
            body = {"error": {"message": "the endpoint is not serving", "type": "server_error", "code": "no_upstream"}}
            return web.json_response(body, status=502)
        async with reply:
            response = web.StreamResponse(status=reply.status, reason=reply.reason, headers=forwarded(reply.headers))
            await response.prepare(request)
            async for chunk in reply.content.iter_any():  # each chunk as Serve sends it
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application(middlewares=[gate])
    app.cleanup_ctx.append(session)
    app.router.add_route("*", r"/{tail:[\s\S]*}", forward)  # every path, line breaks (%0a) included
    return app


@contextmanager
def _pem_files(cert: str | None, key: str | None, env: dict):
    """The certificate and key as files: the flags' paths, or the environment's PEM text in private temporary
    files that exist only while they are loaded."""
    if cert or key:
        yield cert, key
        return
    texts = [env.get(TLS_CERT_ENV, "").strip(), env.get(TLS_KEY_ENV, "").strip()]
    if not any(texts):
        yield None, None
        return
    with tempfile.TemporaryDirectory() as folder:  # mode 0700
        paths = []
        for name, text in zip(("cert.pem", "key.pem"), texts, strict=True):
            path = Path(folder) / name
            path.write_text(text + "\n")
            path.chmod(0o600)
            paths.append(str(path))
        yield paths[0], paths[1]


def tls_context(cert: str | None, key: str | None, env: dict) -> ssl.SSLContext | None:
    if bool(cert) != bool(key):
        raise ConfigError("--tls-cert and --tls-key go together")
    if not (cert or key) and bool(env.get(TLS_CERT_ENV, "").strip()) != bool(env.get(TLS_KEY_ENV, "").strip()):
        raise ConfigError(f"{TLS_CERT_ENV} and {TLS_KEY_ENV} go together")
    with _pem_files(cert, key, env) as (cert_file, key_file):
        if cert_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)  # TLS 1.2 at least, no client certificate
        try:
            context.load_cert_chain(cert_file, key_file)
        except (OSError, ssl.SSLError) as exc:
            where = f"{cert} and {key}" if cert else f"{TLS_CERT_ENV} and {TLS_KEY_ENV}"
            raise ConfigError(f"no usable TLS certificate and key in {where}: {exc}") from None
        return context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayfleet.node.serve.gate", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True, help="the Serve port the callers reach")
    parser.add_argument("--host", default="127.0.0.1", help="where to listen (on ECS 0.0.0.0; default 127.0.0.1)")
    parser.add_argument(
        "--upstream-port", type=int, default=GATED_PROXY_PORT, help="Serve's proxy, on 127.0.0.1 (default %(default)s)"
    )
    parser.add_argument("--key-file", help="the API key in a file only its owner can read, if not in the environment")
    parser.add_argument("--tls-cert", help=f"PEM certificate chain (or the PEM text in {TLS_CERT_ENV})")
    parser.add_argument("--tls-key", help=f"PEM private key (or the PEM text in {TLS_KEY_ENV})")
    opts = parser.parse_args(argv)
    for name in ("port", "upstream_port"):
        if not 1 <= getattr(opts, name) <= 65535:
            parser.error(f"--{name.replace('_', '-')} must be 1-65535")
    if opts.port == opts.upstream_port:
        parser.error(f"--port and --upstream-port are both {opts.port}: the gate would forward to itself")
    context = tls_context(opts.tls_cert, opts.tls_key, dict(os.environ))
    try:
        key = KeySource(opts.key_file).read()
    except KeyMissing as exc:
        raise RayfleetError(str(exc)) from None
    upstream = f"http://127.0.0.1:{opts.upstream_port}"
    scheme = "https" if context else "http"
    web.run_app(
        make_app(key, upstream),
        host=opts.host,
        port=opts.port,
        ssl_context=context,
        access_log=None,
        print=lambda _: say(f"{scheme}://{opts.host}:{opts.port} -> {upstream}, every request with the API key"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
