"""A recipe's `data:` staged for a run that is not on this machine: uploaded once per content to the storage's
bucket, s3://<bucket>/staged/<content hash>/, and reused while the content is unchanged.

The ECS workers cannot read the laptop's data/ (the code package leaves data out: it can be large, and it
changes less often than code). Staging by content hash means the first run uploads, later runs with the same
files upload nothing, and an edited file is a new prefix, so a running job never sees its data change under
it. A prefix counts as staged only once its manifest is written, last: an interrupted upload is done again.
The manifest lists each file's sha256 and size and the prefix is named by their hash (rayfleet/core/
staged_data.py), so a node checks every copy it makes or reuses against it. Only this process (the
operator's credentials) writes `staged/`; the task role reads it.

What is staged is the data folder's own files: a link that leads out of it is refused (a shared recipe must
not ship the operator's ~/.aws), and files that look like state or keys (rayfleet/recipes/package.py
SENSITIVE) are left out and named, as the code package does.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rayfleet.core.aws import Aws
from rayfleet.core.config import ConfigError
from rayfleet.core.staged_data import (
    MANIFEST,
    StagedFile,
    file_sha256,
    manifest_body,
    prefix_of,
)
from rayfleet.recipes.package import looks_sensitive

SAY_EVERY_S = 5.0


def walk(local: Path) -> tuple[list[tuple[str, Path]], list[str]]:
    """(name relative to the staged prefix, path) of every file to stage, and the names left out because they
    look like state or keys. A folder's files (links to folders are not followed), or the one file."""
    local = local.resolve()
    if local.is_file():
        if looks_sensitive(local.name, local):
            raise ConfigError(f"data: {local} looks like state or keys; rayfleet does not stage it")
        return [(local.name, local)], []
    found, left_out = [], []
    for root, dirs, names in os.walk(local):
        for name in [*dirs, *names]:
            path = Path(root) / name
            if path.is_symlink() and not path.resolve().is_relative_to(local):
                rel = path.relative_to(local).as_posix()
                raise ConfigError(f"data: {rel} is a link to {path.resolve()}, outside {local}; copy it in")
        for name in names:
            path = Path(root) / name
            rel = path.relative_to(local).as_posix()
            if path.is_file():
                (left_out if looks_sensitive(rel, path.resolve()) else found).append((rel, path))
    return sorted(found), sorted(rel for rel, _ in left_out)


def files_of(local: Path) -> list[tuple[str, Path]]:
    return walk(local)[0]


def listing(files: list[tuple[str, Path]]) -> list[StagedFile]:
    """What the manifest says of each file: its name, sha256 and size."""
    return [StagedFile(name, file_sha256(path), path.stat().st_size) for name, path in files]


def stage(local: Path, storage: str, region: str | None = None, say=print, clock=time.monotonic) -> str:
    """Upload `local` (a folder or a file) under s3://<storage's bucket>/staged/<hash>/ unless it is there;
    return the URL the job reads: the prefix for a folder, the file's key for a file."""
    if not storage.startswith("s3://"):
        raise ConfigError(f"data: staging needs s3:// storage, not {storage}")
    if not local.exists():
        raise ConfigError(f"data: {local} does not exist (`make data` and `make text-data` write the built-in sets)")
    files, left_out = walk(local)
    if left_out:
        say(f"[rayfleet] left out of data (they look like state or keys): {', '.join(left_out)}")
    if not files:
        raise ConfigError(f"data: {local} has no files")
    described = listing(files)
    bucket = storage.removeprefix("s3://").split("/", 1)[0]
    prefix = prefix_of(described)
    url = f"s3://{bucket}/{prefix}" + (f"/{files[0][0]}" if local.is_file() else "")
    total = sum(f.bytes for f in described)
    what = f"data {local} ({len(files)} file{'s' * (len(files) != 1)}, {total / 1e6:,.1f} MB)"
    s3 = Aws(region).client("s3")
    try:
        s3.head_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}")
        say(f"[rayfleet] {what} already staged at {url}")
        return url
    except s3.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
            raise
    say(f"[rayfleet] staging {what} to s3://{bucket}/{prefix}/ ...")
    began = said = clock()
    sent = 0
    for number, (name, path) in enumerate(files, 1):
        s3.upload_file(str(path), bucket, f"{prefix}/{name}")
        sent += path.stat().st_size
        if clock() - said >= SAY_EVERY_S and number < len(files):
            said = clock()
            say(f"[rayfleet]   {number}/{len(files)} files, {sent / 1e6:,.1f}/{total / 1e6:,.1f} MB")
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}", Body=manifest_body(described, str(local)))
    say(f"[rayfleet] staged {what} in {clock() - began:.1f} s; the job reads {url}")
    return url
