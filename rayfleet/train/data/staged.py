"""A staged data folder (rayfleet/recipes/stage.py) copied to this node once: what a job reads as a local path.

`make run` on ECS stages a recipe's `data:` to s3://<bucket>/staged/<hash>/; every Ray worker calls
`local_copy` before loading. The copy lands in a per-hash folder under the node's cache, complete or not at
all (downloaded beside it, then renamed), so workers sharing a node download it once and never read half.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from rayfleet.core.aws import Aws

CACHE_ENV = "RAYFLEET_DATA_CACHE"
MANIFEST = ".rayfleet-staged.json"  # written last by the stager: a prefix without it is not complete


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / "rayfleet-data")


def local_copy(source: str, endpoint_url: str | None = None) -> Path:
    """`source` itself when it is a local path; for s3://bucket/prefix, a complete local copy of the prefix."""
    if not source.startswith("s3://"):
        return Path(source)
    bucket, _, prefix = source.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    target = cache_root() / bucket / prefix
    if (target / MANIFEST).is_file():
        return target
    s3 = Aws().client("s3", endpoint_url=endpoint_url)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
            for item in page.get("Contents", []):
                name = item["Key"][len(prefix) + 1 :]
                (partial / name).parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, item["Key"], str(partial / name))
        if not (partial / MANIFEST).is_file():
            raise FileNotFoundError(f"data: {source} is not a complete staged copy (no {MANIFEST})")
        try:
            partial.rename(target)
        except OSError:  # another worker on this node finished first: its copy is the same content
            if not (target / MANIFEST).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target
