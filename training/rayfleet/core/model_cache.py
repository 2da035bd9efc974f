"""The S3 model cache's pointer: the one contract between `make push` (the deployer, rayfleet/ops/model_cache.py)
and the worker tasks' model-cache container (rayfleet/node/model_cache.py) of the worker groups with
`models_from = "s3"` (infra/variables.tf).

`make push` stages the preloaded models (the /models of ray-worker:<tag>-models) like a recipe's data, by content
under s3://<bucket>/staged/<hash>/ with a manifest of every file's sha256 (rayfleet/core/staged_data.py), and then
writes the pointer, s3://<bucket>/staged/models.json, naming that prefix. Only the deployer writes staged/, so a
job cannot redirect the pointer; the node still bounds and checks what it reads, and checks its copy against
the manifest the pointer leads to.
"""

from __future__ import annotations

import json

from rayfleet.core.bucket import MODEL_CACHE
from rayfleet.core.errors import RayfleetError
from rayfleet.core.staged_data import staged_prefix

POINTER_KEY = MODEL_CACHE
MAX_POINTER_BYTES = 64 * 1024
LINK = "models"  # <cache>/models: the checked copy the Ray worker reads as MODEL_DIR (infra/modules/ray)
VERSION = 1


class ModelCacheError(RayfleetError):
    """A pointer that is not one `make push` writes: refused, nothing read through it."""


def pointer_body(bucket: str, prefix: str, models: list[str], image: str) -> bytes:
    if staged_prefix(prefix) != prefix:
        raise ValueError(f"{prefix!r} is not a staged prefix")
    return json.dumps(
        {"version": VERSION, "url": f"s3://{bucket}/{prefix}", "models": sorted(models), "image": image}
    ).encode()


def parse_pointer(body: bytes, bucket: str) -> tuple[str, list[str]]:
    """(the staged URL, the model ids) of a pointer in `bucket`; ModelCacheError for anything else."""
    if len(body) > MAX_POINTER_BYTES:
        raise ModelCacheError(f"s3://{bucket}/{POINTER_KEY} is {len(body)} bytes, more than a pointer holds")
    try:
        pointer = json.loads(body)
        url, models = pointer["url"], pointer["models"]
        ok = pointer.get("version") == VERSION and isinstance(url, str) and isinstance(models, list)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok or not all(isinstance(m, str) for m in models):
        raise ModelCacheError(f"s3://{bucket}/{POINTER_KEY} is not a model cache pointer of this rayfleet")
    key = url.removeprefix(f"s3://{bucket}/")
    if not url.startswith(f"s3://{bucket}/") or staged_prefix(key) != key:
        raise ModelCacheError(f"s3://{bucket}/{POINTER_KEY} points outside the bucket's staged copies")
    return url, models
