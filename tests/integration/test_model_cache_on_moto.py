"""The S3 model cache (worker groups with `models_from = "s3"`) under IAM, against the session's moto stack with
the rendered role policies: `make push` stages the models as the operator (rayfleet/ops/model_cache.py publish),
the worker task's model-cache container copies and checks them with the task role (`rayfleet-node model-cache`,
the image's entry point, run here as a process), and a rank then finds the model by its id under MODEL_DIR
(rayfleet/train/models/hf.py), downloading nothing. What no test here can show: the ECS agent honouring
dependsOn and the read-only mount (tests/infra/test_model_cache_render.py checks the rendering), and the
throughput of S3 to a real instance (images/README.md estimates it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from rayfleet.core.model_cache import LINK, POINTER_KEY
from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration

MODEL = "acme/tiny-lm"
PUBLISH = """
import sys
from pathlib import Path
from rayfleet.ops.model_cache import publish
print("URL=" + publish(Path(sys.argv[1]), sys.argv[2], "us-east-1", "ray-worker:test-models"))
"""
RANK = """
import sys
from rayfleet.train.models.hf import local_model_dir
print("FOUND=%s" % local_model_dir(sys.argv[1]))
"""


def run(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """A /models as `make build` preloads it (images/ray-worker/preload.py, its manifest included)."""
    source = tmp_path_factory.mktemp("tiny-lm")
    (source / "config.json").write_text(json.dumps({"model_type": "gpt_neox", "hidden_size": 8}))
    (source / "model.safetensors").write_bytes(os.urandom(300_000))
    dest = tmp_path_factory.mktemp("image") / "models"
    done = run(dict(os.environ), str(REPO / "images/ray-worker/preload.py"), "--dest", str(dest), f"{MODEL}={source}")
    assert done.returncode == 0, done.stderr
    return dest


def node(stack: dict, cache: Path, extra: dict | None = None) -> subprocess.CompletedProcess:
    """The model-cache container: the image's entry point with the task role's credentials only."""
    bucket = stack["outputs"]["results_bucket"]
    env = {
        **stack["env"],
        **stack["roles"]["task"],
        "RAYFLEET_MODEL_CACHE_POINTER": f"s3://{bucket}/{POINTER_KEY}",
        "RAYFLEET_DATA_CACHE": str(cache),
        **(extra or {}),
    }
    return run(env, "-m", "rayfleet.node.ray_node", "model-cache")


def rank_finds(stack: dict, cache: Path) -> str:
    env = {**stack["env"], **stack["roles"]["task"], "MODEL_DIR": str(cache / LINK), "HF_HUB_OFFLINE": "1"}
    found = run(env, "-c", RANK, MODEL)
    assert found.returncode == 0, found.stderr[-2000:]
    return re.search(r"^FOUND=(.*)$", found.stdout, re.M)[1]


def test_pushed_models_reach_a_node_under_the_task_role_checked_and_once(aws_stack, models, tmp_path):
    bucket = aws_stack["outputs"]["results_bucket"]
    s3 = aws_stack["server"].inspector("s3")
    s3.delete_object(Bucket=bucket, Key=POINTER_KEY)
    missing = node(aws_stack, tmp_path / "empty")
    assert missing.returncode == 1 and "no models are staged" in missing.stdout and "make build push" in missing.stdout

    pushed = run(aws_stack["env"], "-c", PUBLISH, str(models), bucket)  # as the operator
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    url = re.search(r"^URL=(\S+)$", pushed.stdout, re.M)[1]
    assert url.startswith(f"s3://{bucket}/staged/")
    pointer = json.loads(s3.get_object(Bucket=bucket, Key=POINTER_KEY)["Body"].read())
    assert pointer["url"] == url and pointer["models"] == [MODEL]
    again = run(aws_stack["env"], "-c", PUBLISH, str(models), bucket)
    assert again.returncode == 0 and f"already staged at {url}" in again.stdout  # nothing uploaded twice

    cache = tmp_path / "node"
    placed = node(aws_stack, cache)
    assert placed.returncode == 0, placed.stdout + placed.stderr[-3000:]
    assert f"model cache: {MODEL} from {url}, checked" in placed.stdout
    found = Path(rank_finds(aws_stack, cache))
    assert found == cache / LINK / MODEL
    assert (found / "model.safetensors").read_bytes() == (models / MODEL / "model.safetensors").read_bytes()
    copy = (cache / LINK).resolve()
    before = (copy / MODEL / "model.safetensors").stat().st_ino

    restarted = node(aws_stack, cache)  # the task restarted on the same instance: checked, not downloaded
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert (cache / LINK).resolve() == copy and (copy / MODEL / "model.safetensors").stat().st_ino == before


def test_a_job_cannot_redirect_the_pointer_and_a_forged_one_is_refused(aws_stack, models, tmp_path):
    bucket = aws_stack["outputs"]["results_bucket"]
    job = aws_stack["server"].client_as("s3", "task")
    with pytest.raises(ClientError) as refused:
        job.put_object(Bucket=bucket, Key=POINTER_KEY, Body=b"{}")
    assert refused.value.response["Error"]["Code"] == "AccessDenied"

    s3 = aws_stack["server"].inspector("s3")  # what only a broken deployer could write: still bounded and checked
    forged = {"version": 1, "url": f"s3://{bucket}/runs/mine", "models": [MODEL], "image": "x"}
    s3.put_object(Bucket=bucket, Key=POINTER_KEY, Body=json.dumps(forged).encode())
    cache = tmp_path / "node"
    cache.mkdir()
    (cache / LINK).symlink_to(tmp_path)  # a link an earlier task left: never kept while the copy is refused
    result = node(aws_stack, cache)
    assert result.returncode == 1 and "points outside the bucket's staged copies" in result.stdout
    assert not os.path.lexists(cache / LINK)


def test_weights_changed_in_the_bucket_are_refused_by_a_new_node(aws_stack, models, tmp_path):
    bucket = aws_stack["outputs"]["results_bucket"]
    pushed = run(aws_stack["env"], "-c", PUBLISH, str(models), bucket)
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    prefix = re.search(r"^URL=(\S+)$", pushed.stdout, re.M)[1].removeprefix(f"s3://{bucket}/")
    s3 = aws_stack["server"].inspector("s3")
    key = f"{prefix}/{MODEL}/model.safetensors"
    original = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    s3.put_object(Bucket=bucket, Key=key, Body=b"not the weights")
    try:
        result = node(aws_stack, tmp_path / "node")
        assert result.returncode == 1 and "does not match" in result.stdout, result.stdout
        assert not os.path.lexists(tmp_path / "node" / LINK)
    finally:
        s3.put_object(Bucket=bucket, Key=key, Body=original)
