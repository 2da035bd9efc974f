"""The model-cache container of a worker group with `models_from = "s3"` (infra/modules/ray/task_definitions.tf):
before the Ray worker starts, copy the models `make push` staged into the instance's cache folder, check the copy
against its manifest, and point <cache>/models at it: the Ray worker mounts the folder read-only and reads it as
MODEL_DIR, so its jobs load the weights from the node's own disk and can change nothing there.

A node that has the copy already (a task restarted on it) downloads nothing: the copy is checked against the
manifest in S3 again (rayfleet/train/data/staged.py). Copies of earlier pointers are removed. Any failure is said
in one line and leaves no link: the ranks that need a model then fail in one line naming it and `make push`.

    rayfleet-node model-cache    (RAYFLEET_MODEL_CACHE_POINTER=s3://<bucket>/staged/models.json, RAYFLEET_DATA_CACHE)
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from rayfleet.core.aws import Aws
from rayfleet.core.errors import RayfleetError
from rayfleet.core.model_cache import LINK, POINTER_KEY, parse_pointer
from rayfleet.node.say import say
from rayfleet.train.data import staged

POINTER_ENV = "RAYFLEET_MODEL_CACHE_POINTER"


def place(pointer_url: str, endpoint_url: str | None = None, clock=time.monotonic) -> Path:
    """The checked copy of the models the pointer names, linked as <cache>/models; RayfleetError else."""
    bucket, _, key = pointer_url.removeprefix("s3://").partition("/")
    if not pointer_url.startswith("s3://") or key != POINTER_KEY:
        raise RayfleetError(f"{POINTER_ENV}={pointer_url} is not s3://<bucket>/{POINTER_KEY}")
    root = staged.cache_root()
    link = root / LINK
    if link.is_symlink() or link.exists():
        link.unlink()  # never a stale link while the copy is checked or replaced
    s3 = Aws().client("s3", endpoint_url=endpoint_url)
    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except s3.exceptions.NoSuchKey:
        raise RayfleetError(f"no models are staged ({pointer_url} is absent): `make build push` stages them") from None
    url, models = parse_pointer(body, bucket)
    began = clock()
    copy = staged.local_copy(url, endpoint_url=endpoint_url)
    for old in (root / bucket / "staged").iterdir():
        if old != copy and not old.name.startswith("."):
            shutil.rmtree(old, ignore_errors=True)  # an earlier pointer's copy: the disk is for this one
    relative = os.path.relpath(copy, root)
    partial = root / f".{LINK}-{os.getpid()}"
    partial.symlink_to(relative)
    partial.replace(link)  # the Ray worker starts after this container: the link is whole when it looks
    say(f"model cache: {', '.join(models) or 'no models'} from {url}, checked, in {clock() - began:.1f} s")
    return copy


def main(env: dict) -> int:
    pointer = env.get(POINTER_ENV)
    if not pointer:
        say(f"model cache: {POINTER_ENV} is not set")
        return 2
    try:
        place(pointer)
    except (RayfleetError, OSError, BotoCoreError, ClientError) as exc:
        say(f"model cache: no models on this node: {exc}")
        return 1
    return 0
