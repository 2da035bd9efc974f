"""A staged data folder (rayfleet/recipes/stage.py) copied to this node once: what a job reads as a local path.

`make run` on ECS stages a recipe's `data:` to s3://<bucket>/staged/<hash>/; every Ray worker calls
`local_copy` before loading. The copy lands in a per-hash folder under the node's cache, complete or not at
all (downloaded beside it, then renamed), so workers sharing a node download it once and never read half.

Every job on the node can write that cache, so no copy is trusted for being there: each call reads the
manifest from S3 (which only the deployer writes), checks that it hashes to the prefix's name, and checks the
copy against it, every file's sha256 and size and no file more, whether it has just been downloaded or was
already there (rayfleet/core/staged_data.py). A copy that does not match is discarded and downloaded again.
What remains: a job running on the node at the same time can change the files after they were checked (it
runs as the same user as the reader, and holds the Ray token anyway: docs/DESIGN.md "What a job can reach").
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import sys
import tempfile
import uuid
from pathlib import Path

from boto3.s3.transfer import TransferConfig

from rayfleet.core.aws import Aws
from rayfleet.core.run_dir import UnsafeKey, inside
from rayfleet.core.staged_data import (
    FOLDER,
    MANIFEST,
    StagedDataError,
    StagedFile,
    file_sha256,
    parse_manifest,
    staged_prefix,
)

CACHE_ENV = "RAYFLEET_DATA_CACHE"
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # S3's rule for a bucket's name
# A staged file can be a 5 GB weights shard (the S3 model cache: rayfleet/node/model_cache.py): more ranged GETs
# at once than boto3's default 10 x 8 MB, so one file fills a GPU node's network.
TRANSFER = TransferConfig(multipart_chunksize=64 * 1024**2, max_concurrency=32)
PLACING_TRIES = 3  # a copy another worker placed first is checked, not trusted; then one more round


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "rayfleet-data")


def local_copy(source: str, endpoint_url: str | None = None) -> Path:
    """`source` itself when it is a local path; for s3://bucket/staged/<hash>, a checked local copy of it in the
    node's cache; for any other s3:// prefix (the user's own data, e.g. under data/), a copy of this process's
    own, never shared: no manifest vouches for it, so no other run may be handed it."""
    if not source.startswith("s3://"):
        return Path(source)
    bucket, _, key = source.removeprefix("s3://").partition("/")
    s3 = Aws().client("s3", endpoint_url=endpoint_url)
    if key.strip("/").split("/", 1)[0] != FOLDER:
        return private_copy(s3, bucket, key.strip("/"), source)
    prefix = staged_prefix(key)
    if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket:  # it names a folder of the node's cache too
        raise StagedDataError(f"data: {source} names no S3 bucket")
    if prefix is None or key.strip("/") != prefix:
        raise StagedDataError(f"data: {source} is not a staged prefix (s3://<bucket>/{FOLDER}/<hash>: rayfleet run)")
    body = manifest_of(s3, bucket, prefix, source)
    files = parse_manifest(body, prefix, source)
    try:
        return shared_copy(s3, bucket, prefix, files, body, source)
    except (UnsafeKey, OSError) as exc:  # a job left a link or a file where the cache's folders go
        print(
            f"[rayfleet] data: the node's cache cannot hold {source} ({type(exc).__name__}); a copy of this "
            "process's own instead",
            file=sys.stderr,
        )
        return _download(s3, bucket, prefix, files, body, Path(tempfile.mkdtemp(prefix="rayfleet-data-")), source)


def shared_copy(s3, bucket: str, prefix: str, files: list[StagedFile], body: bytes, source: str) -> Path:
    """The node's one checked copy of a staged prefix in the cache every job on the node shares."""
    target = inside(cache_root(), f"{bucket}/{prefix}", source)
    for _ in range(PLACING_TRIES):
        if os.path.lexists(target):
            problem = problem_with(target, files, body)
            if problem is None:
                return target
            print(f"[rayfleet] data: the node's copy of {source} {problem}; downloading it again", file=sys.stderr)
            _discard(target)
        partial = _download(s3, bucket, prefix, files, body, target.parent, source)
        try:
            partial.rename(target)
            return target
        except OSError:  # another worker on this node placed one first: checked at the next round
            shutil.rmtree(partial, ignore_errors=True)
    raise StagedDataError(f"data: no copy of {source} on this node matched its manifest after {PLACING_TRIES} tries")


def private_copy(s3, bucket: str, prefix: str, source: str) -> Path:
    """Every object under s3://bucket/prefix/ in a new folder only this process uses (mkdtemp: mode 0700)."""
    if not prefix:
        raise StagedDataError(f"data: {source} names a whole bucket; name the folder of the data")
    folder = Path(tempfile.mkdtemp(prefix="rayfleet-data-"))
    found = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            name = item["Key"][len(prefix) + 1 :]
            if not name or name.endswith("/"):
                continue  # a folder marker
            local = inside(folder, name, f"s3://{bucket}/{item['Key']}")  # a key may not leave the copy
            local.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, item["Key"], str(local))
            found += 1
    if not found:
        shutil.rmtree(folder, ignore_errors=True)
        raise FileNotFoundError(f"data: nothing under {source}")
    return folder


def manifest_of(s3, bucket: str, prefix: str, source: str) -> bytes:
    try:
        return s3.get_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}")["Body"].read()
    except s3.exceptions.NoSuchKey:
        raise FileNotFoundError(f"data: {source} is not a complete staged copy (no {MANIFEST})") from None


def problem_with(folder: Path, files: list[StagedFile], body: bytes) -> str | None:
    """What makes `folder` not a copy of the manifest (`body`, listing `files`), or None when it is one: the
    same files and no more, regular files only, each with its sha256 and size."""
    if folder.is_symlink() or not folder.is_dir():
        return "is not a folder"
    found = set()
    for root, dirs, names in os.walk(folder):
        for name in [*dirs, *names]:
            if (Path(root) / name).is_symlink():
                return "holds a link"  # names a job wrote are not echoed: they reach the operator's terminal
        if not all(stat.S_ISREG((Path(root) / name).lstat().st_mode) for name in names):
            return "holds something that is not a file"  # a pipe would hang the reader
        found.update((Path(root) / name).relative_to(folder).as_posix() for name in names)
    expected = {f.name for f in files} | {MANIFEST}
    if found != expected:
        return f"holds other files than its manifest lists ({len(found ^ expected)} differ)"
    if (folder / MANIFEST).read_bytes() != body:
        return "holds another manifest"
    for item in files:
        path = folder / item.name
        if path.stat().st_size != item.bytes or file_sha256(path) != item.sha256:
            return f"has a changed {item.name}"
    return None


def check_object(s3, bucket: str, key: str, body: bytes, source: str) -> bytes:
    """`body`, read from s3://bucket/key, once it matches its manifest's line when the key is a staged file
    (a single file's `data:`, read without a node copy); any other object is the user's own, read as it is."""
    prefix = staged_prefix(key)
    if prefix is None:
        return body
    name = key.strip("/")[len(prefix) + 1 :]
    listed = {f.name: f for f in parse_manifest(manifest_of(s3, bucket, prefix, source), prefix, source)}
    item = listed.get(name)
    if item is None or len(body) != item.bytes or hashlib.sha256(body).hexdigest() != item.sha256:
        raise StagedDataError(f"data: {source} does not match its staged manifest; refusing it")
    return body


def _download(s3, bucket: str, prefix: str, files: list[StagedFile], body: bytes, parent: Path, source: str) -> Path:
    """A complete, checked copy in a new folder beside the target; nothing left behind when it fails."""
    parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{prefix.rsplit('/', 1)[-1]}-", dir=parent))
    try:
        for item in files:
            key = f"{prefix}/{item.name}"
            local = inside(partial, item.name, f"s3://{bucket}/{key}")  # a name may not leave the copy
            local.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(local), Config=TRANSFER)
            if local.stat().st_size != item.bytes or file_sha256(local) != item.sha256:
                raise StagedDataError(f"data: s3://{bucket}/{key} does not match {source}'s manifest; refusing it")
        (partial / MANIFEST).write_bytes(body)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return partial


def _discard(target: Path) -> None:
    """Out of the way in one rename (a worker checking it at the same time sees it whole or not at all)."""
    trash = target.parent / f".{target.name}-discarded-{uuid.uuid4().hex[:8]}"
    try:
        target.rename(trash)
    except FileNotFoundError:  # another worker discarded it first
        return
    if trash.is_symlink() or not trash.is_dir():
        trash.unlink()
    else:
        shutil.rmtree(trash, ignore_errors=True)
