"""The built images, tested with testinfra's podman backend: users, pinned versions, entry points, the
worker's wait for its head, the trainer's preloaded models, the sidecar without a GPU, and no token."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.images.build import ROOT
from tests.images.helpers import locked_down, podman, task_volumes

pytestmark = pytest.mark.integration
RAY_IMAGES = ("ray-head", "ray-worker", "trainer")


def pins(filename: str) -> dict[str, str]:
    found = {}
    for line in (ROOT / "requirements" / filename).read_text().splitlines():
        match = re.match(r"([\w-]+)(\[[^\]]*\])?==([\w.+]+)", line.strip())
        if match:
            found[match.group(1).lower()] = match.group(3)
    return found


@pytest.mark.parametrize("image", [*RAY_IMAGES, "gpu-metrics"])
def test_the_user_is_not_root(running, image):
    host = running[image]
    assert host.user().uid != 0
    assert host.check_output("id -u") != "0"


@pytest.mark.parametrize("image", RAY_IMAGES)
def test_ray_images_import_the_pinned_versions(running, image):
    want = pins("train.txt")
    script = "import ray, torch, transformers as t; print(ray.__version__, torch.__version__, t.__version__)"
    ray_v, torch_v, transformers_v = running[image].check_output(f'python -c "{script}"').split()
    assert ray_v == want["ray"]
    assert torch_v.split("+")[0] == want["torch"]
    assert transformers_v == want["transformers"]


def test_gpu_metrics_imports_its_pinned_versions_and_no_cuda(running):
    want = pins("monitoring.txt") | pins("core.txt")
    host = running["gpu-metrics"]
    script = "import pynvml, boto3, importlib.metadata as m; print(m.version('nvidia-ml-py'), boto3.__version__)"
    out = host.check_output(f'python -c "{script}"')
    assert out.split() == [want["nvidia-ml-py"], want["boto3"]]
    assert host.run('python -c "import torch"').rc != 0  # a small image: no torch, no CUDA toolkit


@pytest.mark.parametrize("image", RAY_IMAGES)
def test_the_entry_point_exists_and_is_executable(running, image):
    entry = running[image].file("/usr/local/bin/rayfleet-node")
    assert entry.is_file and entry.mode & 0o111
    usage = running[image].run("rayfleet-node")
    assert usage.rc == 2 and "rayfleet-node head" in usage.stderr


# Every first-party module a Ray image carries imports there, with no exceptions: the images copy whole
# packages, exactly those the layers contract keeps from importing anything laptop-only (pyproject.toml). A
# module that reads a file the image lacks (the instance catalog once) fails here, not in the first deployed run.
IN_IMAGE_PACKAGES = ("rayfleet.core", "rayfleet.train", "rayfleet.serve", "rayfleet.recipes", "rayfleet.node")
IMPORT_ALL = f"""
import importlib, pkgutil, rayfleet
carried = sorted(info.name for info in pkgutil.iter_modules(rayfleet.__path__, "rayfleet."))
assert carried == sorted({IN_IMAGE_PACKAGES!r}), carried
for package in carried:
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        if not info.name.endswith(".__main__"):  # a job package's command line runs the job: run, not imported
            importlib.import_module(info.name)
print("imported")
"""


@pytest.mark.parametrize("image", RAY_IMAGES)
def test_every_module_the_image_carries_imports(running, image):
    result = running[image].run(f"python - <<'EOF'\n{IMPORT_ALL}\nEOF")
    # the last line: importing DeepSpeed prints its accelerator warning to stdout on a machine without a GPU
    assert result.rc == 0 and result.stdout.strip().splitlines()[-1:] == ["imported"], result.stderr[-2000:]


def test_image_configs_set_the_entry_points_and_token_mode(built_images):
    expected = {
        "ray-head": (["rayfleet-node"], ["head"]),
        "ray-worker": (["rayfleet-node"], ["worker"]),
        "ray-worker-models": (["rayfleet-node"], ["worker"]),  # the worker, its weights added
        "trainer": (["rayfleet-node", "driver"], ["ddp"]),
        "gpu-metrics": (["python", "-m", "monitoring"], None),
    }
    for image, ref in built_images.items():
        config = json.loads(podman("image", "inspect", ref).stdout)[0]["Config"]
        assert (config["Entrypoint"], config.get("Cmd")) == expected[image], image
        env = dict(e.split("=", 1) for e in config.get("Env", []))
        assert not [k for k in env if "TOKEN" in k or "SECRET" in k], (image, sorted(env))
        if image in (*RAY_IMAGES, "ray-worker-models"):
            assert env["RAY_AUTH_MODE"] == "token"
        labels = config.get("Labels") or {}
        assert labels.get("org.opencontainers.image.revision"), image


def test_no_token_is_baked_into_any_image(built_images, running):
    tokens = [
        p.read_text().strip() for p in (Path.home() / ".config" / "rayfleet").glob("ray-auth-token") if p.exists()
    ]
    for image, host in running.items():
        found = host.run("find / -xdev \\( -name 'ray-auth-token' -o -name 'auth_token' \\) -print 2>/dev/null")
        assert not found.stdout.strip(), (image, found.stdout)
        for token in tokens:  # the developer's own token must not have leaked into a layer
            leaked = podman(
                "run",
                "--rm",
                "--user",
                "0",
                "--entrypoint",
                "grep",
                built_images[image],
                "-rlF",
                token,
                "/opt",
                "/home",
                "/etc",
                "/root",
                "/tmp",
                check=False,
            )
            assert leaked.returncode == 1 and not leaked.stdout, (image, leaked.stdout)


def test_the_worker_gives_up_on_a_head_that_never_answers(built_images):
    """Started as ECS starts it (test_least_privilege.py has the head and the trainer): read-only, no
    capability, its volumes at /tmp, /work and /run/rayfleet."""
    env = ["-e", "RAYFLEET_HEAD_HOST=head.rayfleet-test.invalid", "-e", "RAYFLEET_HEAD_WAIT_S=4"]
    with task_volumes("/tmp", "/work", "/run/rayfleet") as volumes:
        result = podman(
            "run", "--rm", *locked_down("1000"), *volumes, *env, built_images["ray-worker"], check=False, timeout=120
        )
    assert result.returncode != 0
    assert "waiting for the head head.rayfleet-test.invalid:6379" in result.stdout
    assert "did not answer within 4s" in result.stderr


def test_the_models_worker_holds_the_models_its_manifest_lists_and_the_trainer_none(running):
    """The image the FSDP job's ranks run in (ray-worker:<tag>-models) loads the model offline from its own
    $MODEL_DIR; the trainer (the driver) holds no weights, and a rank there would fail in one line naming the
    command that preloads it. The image-level half of the driver and ranks on different filesystems."""
    host = running["ray-worker-models"]
    manifest = json.loads(host.file("/models/manifest.json").content_string)
    (model,) = manifest["models"]
    assert model["id"] == "tiny-gpt-neox" and model["path"].endswith("/tiny-gpt-neox")
    names = {f["name"] for f in model["files"]}
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= names
    for entry in model["files"]:
        path = host.file(f"/models/tiny-gpt-neox/{entry['name']}")
        assert path.size == entry["bytes"] and path.sha256sum == entry["sha256"], entry["name"]
        assert path.user == "ray" and path.mode & 0o6000 == 0, entry["name"]
    assert host.check_output("printenv MODEL_DIR") == "/models"
    assert host.check_output("printenv HF_HUB_OFFLINE") == "1"
    # the training code finds it offline, the way the FSDP job's ranks do
    resolve = "python -c \"from rayfleet.train.models.hf import resolve_model_dir as r; print(r('tiny-gpt-neox'))\""
    assert host.check_output(resolve) == "/models/tiny-gpt-neox"
    trainer = running["trainer"]
    assert not trainer.file("/models").exists
    refused = trainer.run(resolve)
    assert refused.rc != 0
    line = refused.stderr.strip().splitlines()[-1]
    assert "'tiny-gpt-neox' is neither a directory, nor under $MODEL_DIR" in line
    assert line.endswith(
        "make build push MODELS=tiny-gpt-neox (then make deploy, for a worker group with models = true)"
    )


def test_the_weights_are_one_layer_of_their_own_on_top_of_the_worker(built_images):
    """ray-worker:<tag>-models is ray-worker's layers unchanged plus one: the copied /models (a group without
    models pulls none of it; a push of the models image uploads only that layer beyond the worker's)."""

    def layers(ref: str) -> list[str]:
        return json.loads(podman("image", "inspect", ref).stdout)[0]["RootFS"]["Layers"]

    worker, with_models = layers(built_images["ray-worker"]), layers(built_images["ray-worker-models"])
    assert with_models[:-1] == worker and len(with_models) == len(worker) + 1


def test_the_node_health_directory_is_the_sidecars_in_both_images(running):
    """The task volume node-health starts as a copy of the directory of whichever container mounts it first:
    both images give it to the sidecar's uid, which writes its verdict on the GPUs there
    (monitoring/node_health.py) for the worker's entry point to read (rayfleet/node/control/suspect.py)."""
    for image in ("ray-worker", "gpu-metrics"):
        directory = running[image].file("/run/rayfleet-health")
        assert directory.is_directory and (directory.uid, directory.mode) == (10001, 0o755), image


def test_the_sidecar_reports_no_gpu_cleanly(built_images):
    # as ECS runs it: read-only, no capability, no volume but the current-run one (read-only)
    with task_volumes("/run/rayfleet") as volumes:
        volumes[-1] += ":ro"
        result = podman(
            "run", "--rm", *locked_down("10001"), *volumes, built_images["gpu-metrics"], check=False, timeout=120
        )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "error: NVML is not available" in result.stderr and "no NVIDIA driver" in result.stderr


def test_the_s3_model_cache_stages_exactly_the_models_images_weights(built_images, tmp_path):
    """`make push` for a group with models_from = "s3" stages the /models of the same models image
    (rayfleet/ops/model_cache.py extract): every file its manifest lists, byte for byte; the upload and the
    node's copy are tests/integration/test_model_cache_on_moto.py's."""
    from rayfleet.core.staged_data import file_sha256
    from rayfleet.ops.model_cache import MANIFEST, extract

    folder = extract("podman", built_images["ray-worker-models"], tmp_path)
    (model,) = json.loads((folder / MANIFEST).read_text())["models"]
    assert model["id"] == "tiny-gpt-neox" and model["files"]
    for entry in model["files"]:
        path = folder / model["id"] / entry["name"]
        assert path.stat().st_size == entry["bytes"] and file_sha256(path) == entry["sha256"]
    assert not podman("ps", "-a", "--filter", "name=rayfleet-models-", "-q").stdout.strip()  # none left behind
