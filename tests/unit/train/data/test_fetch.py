"""`make data`'s and `make text-data`'s fetch (rayfleet/train/data/fetch.py) against a real HTTP server on 127.0.0.1
serving files of the real format: FashionMNIST's gzipped IDX files and a plain-text play, generated here (the
published ones cannot be downloaded on this machine). The server honours range requests as S3 and GitHub do, can
cut a file short, and counts what it is asked, so the cache, the resume, the mirrors and the checksum refusal are
each seen on the wire."""

from __future__ import annotations

import gzip
import hashlib
import re
from dataclasses import replace
from typing import ClassVar

import pytest

from rayfleet.train.data import fetch, layout, sources, synthetic, synthetic_text, text
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


@pytest.fixture
def text_served(tmp_path, monkeypatch):
    """A file of tiny_shakespeare's format (plain UTF-8 play text, made here: the real one cannot be downloaded
    on this machine) served; the pinned location and checksum pointed at it, nothing else changed."""
    body = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\n" * 400).encode()
    Files.files, Files.asked = {"input.txt": body}, []
    monkeypatch.setenv("RAYFLEET_CACHE_DIR", str(tmp_path / "cache"))
    with serving(Files) as port:
        base = f"http://127.0.0.1:{port}/"
        checksum = "sha256:" + hashlib.sha256(body).hexdigest()
        pinned = replace(sources.TINY_SHAKESPEARE, urls=(base + "input.txt",), checksum=checksum, size=len(body))
        monkeypatch.setattr(sources, "TINY_SHAKESPEARE", pinned)
        yield {"base": base, "body": body}


def test_the_pinned_tiny_shakespeare_is_char_rnns_input_txt_with_its_published_sha256():
    remote = sources.TINY_SHAKESPEARE
    assert remote.urls == ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",)
    assert remote.checksum == "sha256:86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
    assert remote.size == 1_115_394


def test_tiny_shakespeare_is_fetched_checked_cached_and_replaces_generated_text_under_its_name(text_served, tmp_path):
    lines = []
    dest = tmp_path / "data" / "text"
    dest.mkdir(parents=True)
    (dest / "tiny_shakespeare.txt").write_text(synthetic_text.corpus(40))  # what an older `make text-data` wrote
    got = fetch.tiny_shakespeare(dest, say=lines.append)
    assert got == dest / "tiny_shakespeare.txt" and got.read_bytes() == text_served["body"]
    assert lines[0] == f"tiny_shakespeare: removed generated text that was named {got}"
    assert lines[-1] == f"tiny_shakespeare: the published file, checked, in {got}"
    assert fetch.tiny_shakespeare(dest, say=lines.append) == got and lines[-1] == f"tiny_shakespeare: already in {got}"
    again = fetch.tiny_shakespeare(tmp_path / "other", say=lines.append)  # another folder: from the cache
    assert again.read_bytes() == text_served["body"] and [p for p, _ in Files.asked] == ["/input.txt"]
    assert synthetic_text.describe(got.read_text(), str(got)) == f"tiny_shakespeare.txt ({got})"
    generated = fetch.tiny_shakespeare(dest, want_synthetic=True, say=lines.append)  # SYNTHETIC=1 beside the real
    assert generated == dest / "synthetic" / "generated_verse.txt" and got.read_bytes() == text_served["body"]
    assert lines[-1].endswith(f'(the real {got} is there too, and the recipes read it first: ARGS="data={generated}" '
                              "trains on this)")  # fmt: skip


def test_tiny_shakespeare_resumes_a_cut_download_and_refuses_a_wrong_file(text_served, tmp_path):
    remote = sources.TINY_SHAKESPEARE
    cut = replace(remote, urls=(text_served["base"] + "cut/input.txt", *remote.urls))
    assert fetch.download(cut, tmp_path / "cache").read_bytes() == text_served["body"]
    assert [a for _, a in Files.asked] == [None, f"bytes={len(text_served['body']) // 2}-"]
    with pytest.raises(fetch.FetchError, match=r"input\.txt: no location gave the published file, refusing it"):
        fetch.download(replace(remote, checksum="sha256:" + "0" * 64), tmp_path / "other-cache")


def test_offline_or_asked_the_generated_text_goes_under_synthetic_never_the_real_name(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch, "reachable", lambda url, timeout_s=fetch.PROBE_S: False)
    lines = []
    dest = tmp_path / "text"
    got = fetch.tiny_shakespeare(dest, say=lines.append)
    assert got == dest / "synthetic" / "generated_verse.txt" and not (dest / "tiny_shakespeare.txt").exists()
    assert lines == [
        "tiny_shakespeare: no network (raw.githubusercontent.com did not answer within 3 s): using the SYNTHETIC "
        f"generated corpus {got}"
    ]
    assert got.read_text().splitlines()[0] == synthetic_text.LABEL
    asked = fetch.tiny_shakespeare(dest, want_synthetic=True, say=lines.append)
    assert asked == got and lines[-1].startswith("tiny_shakespeare: asked for (SYNTHETIC=1): using the SYNTHETIC")
    # the job given the real name (as the recipes pass it) reads the generated file, and says it is generated
    real_name = str(dest / "tiny_shakespeare.txt")
    assert text.resolve(real_name) == str(got) and text.resolve(str(got)) == str(got)
    assert synthetic_text.describe(got.read_text(), str(got)).startswith("SYNTHETIC generated verse")
    assert text.resolve(str(tmp_path / "nowhere.txt")) == str(tmp_path / "nowhere.txt")  # its error names it
