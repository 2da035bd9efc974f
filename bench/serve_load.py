"""Load on a served model: N concurrent clients for a fixed time, p50/p99 latency and requests/s.

    python -m bench.serve_load [--clients 1 4 8] [--seconds 20] [--max-tokens 16] [--replicas 1]  # BENCH=serve
    python -m bench.serve_load --url http://HOST:8000 --key-file K --clients 32   # an endpoint already up (GPU/vLLM)

Without --url it serves a tiny GPT-NeoX export (generated, SYNTHETIC weights) on the local cluster (the
running one, or one it starts and stops) through `rayfleet serve` with the transformers engine, runs
the load, and shuts Serve down. Bounded: each level runs --seconds, requests time out after 120 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from bench.on_cluster import local_cluster_state
from rayfleet.core import ray_auth
from rayfleet.ops import serve
from tools import tiny_lm

REPO = Path(__file__).resolve().parents[1]
PROMPT = "ROMEO:\nThe noble king speaks the gentle"


def one_request(url: str, key: str, max_tokens: int) -> float:
    body = json.dumps({"prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}).encode()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
    start = time.perf_counter()
    with urllib.request.urlopen(urllib.request.Request(url, body, headers), timeout=120) as reply:
        reply.read()
    return time.perf_counter() - start


def load(url: str, key: str, clients: int, seconds: float, max_tokens: int) -> dict:
    latencies: list[float] = []
    errors = [0]
    deadline = time.monotonic() + seconds

    def client():
        while time.monotonic() < deadline:
            try:
                latencies.append(one_request(url, key, max_tokens))
            except OSError:
                errors[0] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")  # noqa: E731
    return {
        "clients": clients,
        "requests": len(ordered),
        "errors": errors[0],
        "rps": len(ordered) / wall,
        "p50_ms": 1000 * (statistics.median(ordered) if ordered else float("nan")),
        "p99_ms": 1000 * pick(0.99),
        "tokens_per_s": len(ordered) * max_tokens / wall,
    }


def serve_tiny(runs: Path, port: int, replicas: int) -> None:
    export = runs / "bench-lm" / "export"
    tiny_lm.build(export, tiny_lm.corpus(lines=2000))
    cmd = [
        sys.executable,
        "-m",
        "rayfleet.cli.main",
        "serve",
        "up",
        "--run",
        "bench-lm",
        "--on",
        "local",
        "--runs-dir",
        str(runs),
    ]
    cmd += ["--set", f"port={port}", "--set", f"replicas={replicas}"]
    subprocess.run(cmd, cwd=REPO, check=True)


def main(argv: list[str] | None = None) -> int:
    ray_auth.use_token_auth()
    parser = argparse.ArgumentParser(prog="python -m bench.serve_load", description=__doc__.split("\n")[0])
    parser.add_argument("--url", help="an endpoint that is already up (its /v1/completions)")
    parser.add_argument("--key-file", help="with --url: the API key's file")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--replicas", type=int, default=1)
    parser.add_argument("--port", type=int, default=8000)
    opts = parser.parse_args(argv)
    rows = []
    if opts.url:
        key = Path(opts.key_file).read_text().strip()
        rows = [
            load(opts.url.rstrip("/") + "/v1/completions", key, c, opts.seconds, opts.max_tokens) for c in opts.clients
        ]
    else:
        with local_cluster_state(), tempfile.TemporaryDirectory() as tmp:
            serve_tiny(Path(tmp), opts.port, opts.replicas)
            key = serve.local_key_file().read_text().strip()
            url = f"http://127.0.0.1:{opts.port}/v1/completions"
            try:
                one_request(url, key, opts.max_tokens)  # warm-up
                rows = [load(url, key, c, opts.seconds, opts.max_tokens) for c in opts.clients]
            finally:
                subprocess.run([sys.executable, "-m", "rayfleet.cli.main", "serve", "down", "--on", "local"], cwd=REPO)
    print(f"\n{'clients':>8} {'requests':>9} {'errors':>7} {'req/s':>7} {'p50 ms':>8} {'p99 ms':>8} {'tokens/s':>9}")
    for r in rows:
        print(
            f"{r['clients']:>8} {r['requests']:>9} {r['errors']:>7} {r['rps']:>7.2f} {r['p50_ms']:>8.0f} "
            f"{r['p99_ms']:>8.0f} {r['tokens_per_s']:>9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
