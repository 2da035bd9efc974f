"""`make push` of the tag already deployed (a first deploy, before any push) marks its images `deployed-<tag>`,
and ray-worker's models image `deployed-<tag>-models`, which the ECR lifecycle never expires
(infra/modules/registry/README.md); a push of any other tag marks nothing. The container engine is a stand-in
that accepts login, tag and push (no registry upload); the images it would upload are put into moto's ECR by
the test, as a real push would leave them."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, verbs_env
from tools.moto_stack import stack

pytestmark = pytest.mark.integration

MANIFEST = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
    "config": {
        "mediaType": "application/vnd.docker.container.image.v1+json",
        "size": 7,
        "digest": "sha256:" + "c" * 64,
    },
}


@pytest.fixture
def pushed(ecs_moto, tmp_path):
    outputs = stack.create(ecs_moto, tmp_path, trainer_slots=1)
    engine = tmp_path / "bin" / "fake-engine"
    engine.parent.mkdir()
    engine.write_text("#!/bin/sh\ncat >/dev/null 2>&1 || true\nexit 0\n")  # login reads the password on stdin
    engine.chmod(0o755)
    env = verbs_env(ecs_moto.url, outputs["outputs_file"], stack.REGION, RAYFLEET_ENGINE="fake-engine")
    env["PATH"] = f"{engine.parent}:{env['PATH']}"
    ecr = ecs_moto.client("ecr")
    repositories = [url.split("/", 1)[1] for url in outputs["ecr_repository_urls"].values()]
    for name in repositories:
        ecr.create_repository(repositoryName=name, imageTagMutability="IMMUTABLE")
    worker_url = outputs["ecr_repository_urls"]["ray-worker"]
    return {
        "env": env,
        "ecr": ecr,
        "repositories": repositories,
        "deployed": outputs["image_tag"],
        "worker_url": worker_url,
    }


def upload(ecr, repositories, tag):
    for name in repositories:
        layer = {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": 1}
        layer["digest"] = "sha256:" + hashlib.sha256(f"{name}:{tag}".encode()).hexdigest()
        ecr.put_image(repositoryName=name, imageManifest=json.dumps({**MANIFEST, "layers": [layer]}), imageTag=tag)


def push(env, tag):
    command = [sys.executable, "-m", "rayfleet.cli.main", "images", "push", "--tag", tag]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def tags(ecr, name):
    return sorted(t for i in ecr.describe_images(repositoryName=name)["imageDetails"] for t in i.get("imageTags", []))


def test_push_marks_only_the_deployed_tag(pushed):
    ecr, repositories, deployed = pushed["ecr"], pushed["repositories"], pushed["deployed"]
    upload(ecr, repositories, "a1b2c3d4e5f6")
    other = push(pushed["env"], "a1b2c3d4e5f6")
    assert other.returncode == 0, other.stderr
    assert all(tags(ecr, r) == ["a1b2c3d4e5f6"] for r in repositories)  # not deployed: no mark
    upload(ecr, repositories, deployed)
    worker = next(r for r in repositories if r.endswith("ray-worker"))
    upload(ecr, [worker], f"{deployed}-models")  # the models image a group with models runs (built: the stand-in)
    result = push(pushed["env"], deployed)
    assert result.returncode == 0, result.stderr
    assert f"pushing {pushed['worker_url']}:{deployed}-models ..." in result.stdout
    marked = sorted(["a1b2c3d4e5f6", deployed, f"deployed-{deployed}"])
    assert all(tags(ecr, r) == marked for r in repositories if r != worker)
    assert tags(ecr, worker) == sorted([*marked, f"{deployed}-models", f"deployed-{deployed}-models"])
    assert f"marked {len(repositories)} image(s) deployed-{deployed}" in result.stdout
