"""`make data`'s fetch (rayfleet/train/data/fetch.py) against a real HTTP server on 127.0.0.1 serving files of the
real format: FashionMNIST's gzipped IDX files, generated here (the published ones cannot be downloaded on this
machine). The server honours range requests as S3 and GitHub do, can cut a file short, and counts what it is
asked, so the cache, the resume, the mirrors and the checksum refusal are each seen on the wire."""

from __future__ import annotations

import gzip
import hashlib
import re
from dataclasses import replace
from typing import ClassVar

import pytest

from rayfleet.train.data import fetch, layout, sources, synthetic
from rayfleet.train.data.fashion_mnist import load
from tests.unit.node.http_stub import QuietHandler, serving


class Files(QuietHandler):
    """GET /<name> from `files`, with Range; /cut/<name> sends the first half and closes; others 404."""

    files: ClassVar[dict[str, bytes]] = {}
    asked: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self):
        type(self).asked.append((self.path, self.headers.get("Range")))
        cut = self.path.startswith("/cut/")
        body = self.files.get(self.path.removeprefix("/cut/").lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        start = 0
        if match := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or ""):
            start = int(match[1])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start : len(body) // 2] if cut else body[start:])
        if cut:
            self.close_connection = True


@pytest.fixture
def served(tmp_path, monkeypatch):
    """The four FashionMNIST files, gzipped from a small generated set, served; the pinned list pointed here."""
    raw = layout.raw_dir(synthetic.generate(tmp_path / "made", train=20, test=10).parent.parent)
    files = {f"{p.name}.gz": gzip.compress(p.read_bytes(), mtime=0) for p in raw.iterdir()}
    Files.files, Files.asked = files, []
    monkeypatch.setenv("RAYFLEET_CACHE_DIR", str(tmp_path / "cache"))
    with serving(Files) as port:
        base = f"http://127.0.0.1:{port}/"
        pinned = tuple(
            replace(r, urls=(base + r.name,), checksum="md5:" + hashlib.md5(files[r.name]).hexdigest())
            for r in sources.FASHION_MNIST
        )
        monkeypatch.setattr(sources, "FASHION_MNIST", pinned)
        yield {"base": base, "files": files, "raw": raw}


def test_the_pinned_checksums_are_torchvisions_published_ones():
    from torchvision.datasets import FashionMNIST

    assert [(r.name, r.checksum) for r in sources.FASHION_MNIST] == [(n, f"md5:{m}") for n, m in FashionMNIST.resources]
    assert all(r.urls[0] == FashionMNIST.mirrors[0] + r.name and len(r.urls) == 2 for r in sources.FASHION_MNIST)


def test_the_real_set_is_fetched_unpacked_and_later_reused_from_the_cache(served, tmp_path):
    lines = []
    root = fetch.fashion_mnist(tmp_path / "data", say=lines.append)
    assert root == tmp_path / "data" and not layout.is_synthetic(root)
    for path in layout.raw_files(root).values():
        assert path.read_bytes() == (served["raw"] / path.name).read_bytes()
    assert len(load(root, train=True)) == 20  # torchvision reads it
    assert lines[-1].startswith("FashionMNIST: the published files, checked, in ")
    asked = len(Files.asked)
    assert asked == 4
    fetch.fashion_mnist(tmp_path / "again", say=lines.append)  # another data folder: the cache serves it
    assert (
        len(Files.asked) == asked
        and lines.count(
            "train-images-idx3-ubyte.gz: in the cache ("
            + str(fetch.cache_dir() / "fashion-mnist" / "train-images-idx3-ubyte.gz")
            + ")"
        )
        == 1
    )


def test_a_cut_download_resumes_where_it_stopped_and_a_dead_mirror_is_passed(served, tmp_path):
    remote = sources.FASHION_MNIST[0]
    cut = replace(remote, urls=(served["base"] + "cut/" + remote.name, served["base"] + "gone", *remote.urls))
    lines = []
    got = fetch.download(cut, tmp_path / "cache", say=lines.append)
    assert got.read_bytes() == served["files"][remote.name]
    half = len(served["files"][remote.name]) // 2
    # the cut first location, the missing second, then the third asked for the rest only
    assert [a for _, a in Files.asked] == [None, f"bytes={half}-", f"bytes={half}-"]
    assert f"{remote.name}: resuming at {half / 1e6:.1f} MB from {remote.urls[0]}" in lines


def test_a_file_that_is_not_the_published_one_is_refused_in_one_line(served, tmp_path):
    remote = replace(sources.FASHION_MNIST[1], checksum="md5:" + "0" * 32)
    with pytest.raises(fetch.FetchError) as exc:
        fetch.download(remote, tmp_path / "cache")
    (line,) = str(exc.value).splitlines()
    assert line.startswith(f"{remote.name}: no location gave the published file, refusing it (")
    assert f"not the published {'0' * 32}" in line
    assert not any((tmp_path / "cache").iterdir())  # nothing kept under either name


def test_offline_or_asked_the_generated_set_goes_under_synthetic_never_the_real_name(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "reachable", lambda url, timeout_s=fetch.PROBE_S: False)
    lines = []
    root = fetch.fashion_mnist(tmp_path / "data", say=lines.append)
    assert root == tmp_path / "data" / "synthetic" and layout.is_synthetic(root)
    assert layout.missing_files(tmp_path / "data")  # nothing under the real set's name
    assert lines == [
        f"FashionMNIST: no network (fashion-mnist.s3-website.eu-central-1.amazonaws.com did not "
        f"answer within 3 s): using the SYNTHETIC FashionMNIST-format set in {root}"
    ]
    asked = fetch.fashion_mnist(tmp_path / "data", want_synthetic=True, say=lines.append)
    assert asked == root and lines[-1].startswith("FashionMNIST: asked for (SYNTHETIC=1): using the SYNTHETIC")


def test_the_probe_is_a_connection_that_opens_or_not(served):
    assert fetch.reachable(served["base"]) and not fetch.reachable("http://127.0.0.1:9/", timeout_s=1)


def test_a_job_reads_the_real_set_when_it_is_there_else_the_generated_one(tmp_path):
    """layout.resolve, as the DDP job's data_dir=data reads it after `make data`, online or not."""
    from rayfleet.train.ddp.config import DDPConfig

    data = tmp_path / "data"
    assert layout.resolve(data) == data  # neither: the error names what was given
    synthetic.generate(data / "synthetic", train=10, test=10)
    assert layout.resolve(data) == data / "synthetic" and layout.is_synthetic(layout.resolve(data))
    DDPConfig(data_dir=str(data))  # the config check finds the generated set too
    real = layout.raw_dir(data)
    real.mkdir(parents=True)
    for path in layout.raw_files(data / "synthetic").values():
        (real / path.name).write_bytes(path.read_bytes())  # stands in for the fetched real files
    assert layout.resolve(data) == data and not layout.is_synthetic(data)
