"""`make data` and `make text-data`: the real FashionMNIST and tiny_shakespeare, fetched from their pinned
locations and checked against their published checksums (rayfleet/train/data/sources.py), into a cache that
later fetches reuse, then unpacked into torchvision's layout under the data folder (FashionMNIST) or copied to
`<text folder>/tiny_shakespeare.txt`. With no network (a connection to the first location that does not open
within PROBE_S), or when asked (`--synthetic`, make's SYNTHETIC=1), it generates the offline set instead, under
`<folder>/synthetic/`: never under the real set's name, and every job that reads it says SYNTHETIC.

    python -m rayfleet.train.data.fetch fashion-mnist data [--synthetic]
    python -m rayfleet.train.data.fetch tiny-shakespeare data/text [--synthetic]

A download shows its progress, resumes a partial file where it stopped (an HTTP range request), goes on to the
next location when one fails, and refuses a file whose checksum is not the published one, in one line.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from rayfleet.core.net import PROBE_S, reachable
from rayfleet.train.data import layout, sources, synthetic, synthetic_text

TIMEOUT_S = 30.0  # a stalled download gives up on that location after this long without data
PROGRESS_EVERY_S = 2.0


class FetchError(Exception):
    """A file no location would give as published (one line)."""


def cache_dir() -> Path:
    """Where fetched files are kept for the next fetch: $RAYFLEET_CACHE_DIR, else the user's cache folder."""
    if os.environ.get("RAYFLEET_CACHE_DIR"):
        return Path(os.environ["RAYFLEET_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rayfleet" / "datasets"


def mismatch(path: Path, checksum: str) -> str | None:
    """Why `path` is not the published file ("md5 <got>, not <want>"), or None."""
    kind, want = checksum.split(":", 1)
    digest = hashlib.new(kind)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    got = digest.hexdigest()
    return None if got == want else f"{kind} {got}, not the published {want}"


def download(remote: sources.Remote, cache: Path, say: Callable[[str], None] = print) -> Path:
    """The published file in `cache` (fetched unless a checked copy is there), or FetchError."""
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / remote.name
    if done.is_file() and mismatch(done, remote.checksum) is None:
        say(f"{remote.name}: in the cache ({done})")
        return done
    part = cache / f"{remote.name}.part"
    problems = []
    for url in remote.urls:
        try:
            _get(url, part, remote, say)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            problems.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
            continue  # the partial file stays: the next location resumes it
        wrong = mismatch(part, remote.checksum)
        if wrong:
            part.unlink()
            problems.append(f"{url}: {wrong}")
            continue
        part.replace(done)
        return done
    raise FetchError(f"{remote.name}: no location gave the published file, refusing it ({'; '.join(problems)})")


def _get(url: str, part: Path, remote: sources.Remote, say: Callable[[str], None]) -> None:
    """`url` into `part`, from where a partial `part` stopped when the server takes a range request."""
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        resumed = have and response.status == 206
        if have and resumed:
            say(f"{remote.name}: resuming at {have / 1e6:.1f} MB from {url}")
        elif have:
            have = 0  # the server sent the whole file: start again
        length = response.headers.get("Content-Length")
        total = have + int(length) if length else remote.size
        shown = time.monotonic()
        with open(part, "ab" if resumed else "wb") as out:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                have += len(block)
                if time.monotonic() - shown >= PROGRESS_EVERY_S:
                    shown = time.monotonic()
                    say(f"{remote.name}: {_progress(have, total)}")
    if total and have < total:  # the connection ended early: what came stays, for the next try to resume
        raise ConnectionError(f"cut short at {have:,} of {total:,} bytes")
    say(f"{remote.name}: {_progress(have, total)} from {url}")


def _progress(have: int, total: int | None) -> str:
    return f"{have / 1e6:.1f}/{total / 1e6:.1f} MB ({100 * have // total}%)" if total else f"{have / 1e6:.1f} MB"


def why_generated(first_url: str, want_synthetic: bool) -> str | None:
    """Why the generated set stands in (asked for, or no network: the probe of the first location), or None."""
    if want_synthetic:
        return "asked for (SYNTHETIC=1)"
    if not reachable(first_url):
        return f"no network ({urlsplit(first_url).hostname} did not answer within {PROBE_S:g} s)"
    return None


def fashion_mnist(dest: Path, want_synthetic: bool = False, say: Callable[[str], None] = print) -> Path:
    """The FashionMNIST root the jobs should read: `dest` holding the real set, or `dest`/synthetic holding the
    generated one (asked for, or no network)."""
    if not want_synthetic and not layout.missing_files(dest) and not layout.is_synthetic(dest):
        say(f"FashionMNIST: already in {layout.raw_dir(dest)}")
        return dest
    why = why_generated(sources.FASHION_MNIST[0].urls[0], want_synthetic)
    if why:
        generated = dest / layout.SYNTHETIC_DIR
        if layout.missing_files(generated):
            synthetic.generate(generated)
        say(f"FashionMNIST: {why}: using the SYNTHETIC FashionMNIST-format set in {generated}")
        return generated
    cache = cache_dir() / "fashion-mnist"
    for remote in sources.FASHION_MNIST:
        packed = download(remote, cache, say)
        target = layout.raw_dir(dest) / remote.name.removesuffix(".gz")
        target.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(packed, "rb") as src, open(f"{target}.tmp", "wb") as out:
            shutil.copyfileobj(src, out)
        os.replace(f"{target}.tmp", target)
    (dest / layout.SYNTHETIC_MARKER).unlink(missing_ok=True)  # a generated set an older rayfleet left here
    say(f"FashionMNIST: the published files, checked, in {layout.raw_dir(dest)}")
    return dest


def tiny_shakespeare(dest: Path, want_synthetic: bool = False, say: Callable[[str], None] = print) -> Path:
    """The text file the FSDP job should read: `dest`/tiny_shakespeare.txt, the published file; or the generated
    corpus under `dest`/synthetic (asked for, or no network; rayfleet/train/data/synthetic_text.py)."""
    real = dest / synthetic_text.REAL_NAME
    if real.is_file() and synthetic_text.file_is_generated(real):
        real.unlink()  # generated text an older rayfleet wrote under the real file's name
        say(f"tiny_shakespeare: removed generated text that was named {real}")
    if not want_synthetic and real.is_file() and mismatch(real, sources.TINY_SHAKESPEARE.checksum) is None:
        say(f"tiny_shakespeare: already in {real}")
        return real
    why = why_generated(sources.TINY_SHAKESPEARE.urls[0], want_synthetic)
    if why:
        generated = synthetic_text.write(dest)
        also = f' (the real {real} is there too, and the recipes read it first: ARGS="data={generated}" trains on this)'
        say(
            f"tiny_shakespeare: {why}: using the SYNTHETIC generated corpus {generated}"
            + (also if real.is_file() else "")
        )
        return generated
    fetched = download(sources.TINY_SHAKESPEARE, cache_dir() / "tiny-shakespeare", say)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(fetched, f"{real}.tmp")
    os.replace(f"{real}.tmp", real)
    say(f"tiny_shakespeare: the published file, checked, in {real}")
    return real


DATASETS = {"fashion-mnist": fashion_mnist, "tiny-shakespeare": tiny_shakespeare}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", choices=sorted(DATASETS))
    parser.add_argument("dest", type=Path, help="the data folder (FashionMNIST/raw/ or tiny_shakespeare.txt in it)")
    parser.add_argument("--synthetic", action="store_true", help="the generated offline set, under DEST/synthetic")
    args = parser.parse_args(argv)
    try:
        DATASETS[args.dataset](args.dest, args.synthetic)
    except FetchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
