"""A recipe's `data:` staged for a run that is not on this machine: uploaded once per content to the storage's
bucket, s3://<bucket>/staged/<content hash>/, and reused while the content is unchanged.

The ECS workers cannot read the laptop's data/ (the code package leaves data out: it can be large, and it
changes less often than code). Staging by content hash means the first run uploads, later runs with the same
files upload nothing, and an edited file is a new prefix, so a running job never sees its data change under
it. A prefix counts as staged only once its manifest is written, last: an interrupted upload is done again.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from rayfleet.core.aws import Aws
from rayfleet.core.config import ConfigError
from rayfleet.train.data.staged import MANIFEST  # the reader's completeness mark: one name, its owner's

SAY_EVERY_S = 5.0


def files_of(local: Path) -> list[tuple[str, Path]]:
    """(name relative to the staged prefix, path) of every file: a folder's files, or the one file."""
    if local.is_file():
        return [(local.name, local)]
    return sorted((p.relative_to(local).as_posix(), p) for p in local.rglob("*") if p.is_file())


def content_hash(files: list[tuple[str, Path]]) -> str:
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def stage(local: Path, storage: str, region: str | None = None, say=print, clock=time.monotonic) -> str:
    """Upload `local` (a folder or a file) under s3://<storage's bucket>/staged/<hash>/ unless it is there;
    return the URL the job reads: the prefix for a folder, the file's key for a file."""
    if not storage.startswith("s3://"):
        raise ConfigError(f"data: staging needs s3:// storage, not {storage}")
    if not local.exists():
        raise ConfigError(f"data: {local} does not exist (`make data` and `make text-data` write the built-in sets)")
    files = files_of(local)
    if not files:
        raise ConfigError(f"data: {local} has no files")
    bucket = storage.removeprefix("s3://").split("/", 1)[0]
    prefix = f"staged/{content_hash(files)[:16]}"
    url = f"s3://{bucket}/{prefix}" + (f"/{files[0][0]}" if local.is_file() else "")
    total = sum(p.stat().st_size for _, p in files)
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
    manifest = {"files": [n for n, _ in files], "bytes": total, "source": str(local)}
    s3.put_object(Bucket=bucket, Key=f"{prefix}/{MANIFEST}", Body=json.dumps(manifest).encode())
    say(f"[rayfleet] staged {what} in {clock() - began:.1f} s; the job reads {url}")
    return url
