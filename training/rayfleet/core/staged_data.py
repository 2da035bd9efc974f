"""The staged-data contract: what the deployer writes under s3://<bucket>/staged/<hash>/ (rayfleet/recipes/stage.py)
and what a node accepts as a copy of it (rayfleet/train/data/staged.py, rayfleet/train/data/text.py).

Only the deployer writes `staged/` (the task role may read it, never write it). The manifest, written last,
lists every file with its sha256 and size, and the prefix's name is the start of the hash of that listing, so
the name alone says which content it holds: a manifest that does not hash to its prefix's name is refused, and
so is a file that does not match its manifest's line. A node's cached copy is shared by every job on the node
and any of them can write it, so the node checks the copy against the manifest in S3 every time it reuses it,
never against a manifest in its own cache.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from rayfleet.core.bucket import STAGED, folder
from rayfleet.core.errors import RayfleetError

FOLDER = folder(STAGED)  # s3://<bucket>/staged/<hash>/: read by the task role, written by the deployer only
MANIFEST = ".rayfleet-staged.json"  # written last: a prefix without it is not complete
VERSION = 2  # 2: every file's sha256 and size; a manifest without them (version 1) is staged again
HASH_CHARS = 16
_PREFIX = re.compile(rf"{FOLDER}/([0-9a-f]{{{HASH_CHARS}}})")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class StagedDataError(RayfleetError):
    """A staged prefix or a copy of it that does not match its manifest: refused, never read."""


@dataclass(frozen=True)
class StagedFile:
    name: str  # relative to the prefix, '/'-separated
    sha256: str
    bytes: int


def file_sha256(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def content_hash(files: list[StagedFile]) -> str:
    """The hash of the listing (names, sizes, contents' sha256): the prefix's name is its first HASH_CHARS."""
    listing = [[f.name, f.sha256, f.bytes] for f in sorted(files, key=lambda f: f.name)]
    return hashlib.sha256(json.dumps(listing, separators=(",", ":")).encode()).hexdigest()


def prefix_of(files: list[StagedFile]) -> str:
    return f"{FOLDER}/{content_hash(files)[:HASH_CHARS]}"


def manifest_body(files: list[StagedFile], source: str) -> bytes:
    listed = [{"name": f.name, "sha256": f.sha256, "bytes": f.bytes} for f in sorted(files, key=lambda f: f.name)]
    total = sum(f.bytes for f in files)
    return json.dumps({"version": VERSION, "files": listed, "bytes": total, "source": source}).encode()


def staged_prefix(key: str) -> str | None:
    """`staged/<hash>` when `key` is that prefix or a key below it, else None."""
    found = _PREFIX.match(key.strip("/"))
    if not found or key.strip("/")[found.end() :][:1] not in ("", "/"):
        return None
    return found[0]


def parse_manifest(body: bytes, prefix: str, url: str) -> list[StagedFile]:
    """The files a manifest lists, once it is well formed and hashes to its prefix's name; StagedDataError else."""
    try:
        manifest = json.loads(body)
        entries = manifest["files"] if isinstance(manifest, dict) and manifest.get("version") == VERSION else None
        files = [_entry(item) for item in entries] if isinstance(entries, list) else None
    except (ValueError, KeyError, TypeError):
        files = None
    if files is None:
        raise StagedDataError(
            f"data: {url} has no manifest of this rayfleet's version; `rayfleet run` stages the data again"
        )
    names = [f.name for f in files]
    if len(set(names)) != len(names) or MANIFEST in names:
        raise StagedDataError(f"data: {url}: its manifest lists a file twice, or itself")
    if prefix.rsplit("/", 1)[-1] != content_hash(files)[:HASH_CHARS]:
        raise StagedDataError(f"data: {url}: its manifest does not hash to the prefix's name; refusing the data")
    return files


def _entry(item) -> StagedFile:
    name, digest, size = item["name"], item["sha256"], item["bytes"]
    if not isinstance(name, str) or not isinstance(digest, str) or not _SHA256.fullmatch(digest):
        raise ValueError(item)
    if type(size) is not int or size < 0:
        raise ValueError(item)
    return StagedFile(name, digest, size)
