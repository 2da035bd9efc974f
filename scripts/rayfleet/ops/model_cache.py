"""`make push` for the worker groups with `models_from = "s3"` (infra/variables.tf): the preloaded models, the
/models of ray-worker:<tag>-models, staged to the deployment's bucket by content (staged/<hash>/, uploaded once
per content, like a recipe's data: rayfleet/recipes/stage.py), then the pointer the worker tasks' model-cache
container follows (rayfleet/core/model_cache.py). A push whose models did not change uploads nothing.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import uuid
from pathlib import Path

from rayfleet.core.aws import Aws
from rayfleet.core.errors import RayfleetError
from rayfleet.core.model_cache import POINTER_KEY, pointer_body
from rayfleet.ecs.outputs import Outputs
from rayfleet.recipes import stage

MANIFEST = "manifest.json"  # what images/ray-worker/preload.py writes beside the models


def groups_from_s3(out: Outputs) -> list[str]:
    return [name for name, group in out.worker_groups.items() if group.models and group.models_from == "s3"]


def extract(tool: str, image: str, dest: Path) -> Path:
    """The image's /models, copied out into `dest`/models."""
    name = f"rayfleet-models-{uuid.uuid4().hex[:8]}"
    created = subprocess.run([tool, "create", "--name", name, image, "true"], capture_output=True, text=True)
    if created.returncode != 0:
        raise RayfleetError(f"{tool} create {image} failed: {created.stderr.strip()[:300]}")
    try:
        copied = subprocess.run([tool, "cp", f"{name}:/models", str(dest)], capture_output=True, text=True)
        if copied.returncode != 0:
            raise RayfleetError(f"{tool} cp {image}:/models failed: {copied.stderr.strip()[:300]}")
    finally:
        subprocess.run([tool, "rm", "-f", name], capture_output=True)
    return dest / "models"


def publish(folder: Path, bucket: str, region: str | None, image: str, say=print) -> str:
    """Stage `folder` (a /models with its manifest.json) to `bucket` and point the model cache at it; the staged
    URL. Nothing is uploaded when that content is staged already; the pointer is written every time."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise RayfleetError(f"{image} has no /models/{MANIFEST}: rebuild it (make build)")
    models = [m["id"] for m in json.loads(manifest.read_text()).get("models", [])]
    url = stage.stage(folder, f"s3://{bucket}", region=region, say=say)
    body = pointer_body(bucket, url.removeprefix(f"s3://{bucket}/"), models, image)
    Aws(region).client("s3").put_object(Bucket=bucket, Key=POINTER_KEY, Body=body)
    say(f"[rayfleet] the S3 model cache holds {', '.join(models) or 'no models'} ({url}); the nodes of the groups "
        "with models_from = \"s3\" copy it at task start")  # fmt: skip
    return url


def push_to_cache(tool: str, image: str, out: Outputs, say=print) -> str:
    say(f"[rayfleet] staging the models of {image} for worker group(s) {', '.join(groups_from_s3(out))} ...")
    with tempfile.TemporaryDirectory(prefix="rayfleet-models-") as tmp:
        return publish(extract(tool, image, Path(tmp)), out.results_bucket, out.region, image, say=say)
