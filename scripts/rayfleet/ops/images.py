"""Build the four images with docker or podman, and push them to the ECR repositories Terraform made.

    rayfleet images build [--images ray-head,trainer] [--tag TAG] [--models M]
    rayfleet images push  [--images ...] [--tag TAG]

Images are tagged with the git revision (`--tag`, default `git rev-parse --short=12 HEAD`). ray-head,
ray-worker and trainer build FROM the shared `ray-base` (images/base/ray.Dockerfile), built first.
With ray-worker it also builds ray-worker:<tag>-models, the worker with the built-in recipes' models preloaded
(`--models` names others, `none` none; rayfleet/ops/image_models.py), which only the worker groups with
`models = true` run. The build says first what it builds and preloads, and last each image's size and what
`rayfleet images push` will upload.
Bases: BASE_IMAGE (Ray images) and PYTHON_BASE_IMAGE (gpu-metrics) override the Dockerfiles' defaults,
which is how tests build on a local debootstrap base. With podman, the host's pip configuration (local
package indexes, the CA bundle of an intercepting proxy) is mounted for the build only, never copied
into a layer.
"""

from __future__ import annotations

import base64
import configparser
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from rayfleet.core import local_state, pip_config
from rayfleet.core.aws import Aws, MissingOutputs
from rayfleet.core.errors import RayfleetError
from rayfleet.core.moved import gone
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops import image_models, model_cache
from rayfleet.ops.image_sizes import size_report

ROOT = local_state.project_dir()  # the checkout the images build from: images/ and training/

IMAGES = ("ray-head", "ray-worker", "trainer", "gpu-metrics")
RAY_IMAGES = ("ray-head", "ray-worker", "trainer")
# Passed from the environment as build arguments when set: the bases (tests build on a local one) and the EFA
# variant of ray-worker (EFA_INSTALLER_VERSION: libfabric and NCCL's OFI plugin, images/ray-worker/Dockerfile).
BUILD_ARGS_FROM_ENV = (
    "BASE_IMAGE",
    "PYTHON_BASE_IMAGE",
    "EFA_INSTALLER_VERSION",
    "EFA_INSTALLER_SHA256",
    "AWS_OFI_NCCL_VERSION",
    "AWS_OFI_NCCL_SHA512",
)
# The EFA installer ray-worker gets when the deployment has a worker group with EFA: the newest version whose
# SHA-256 images/ray-worker/Dockerfile carries from AWS's published table.
EFA_INSTALLER = "1.47.0"
LOCAL_PREFIX = "localhost/rayfleet"
# The tag that protects an image from the ECR lifecycle (infra/modules/registry: rule 1 selects it, so no later
# rule can expire it), and how many images per repository may carry it: rule 1's count, which mark_deployed
# never lets the marked images exceed, so rule 1 itself expires none.
DEPLOYED_PREFIX = "deployed-"
DEPLOYED_KEPT = 10
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def engine() -> str:
    """docker when its daemon answers, else podman (daemonless); RAYFLEET_ENGINE picks one."""
    wanted = os.environ.get("RAYFLEET_ENGINE")
    for name in [wanted] if wanted else ["docker", "podman"]:
        if not shutil.which(name):
            continue
        docker_down = name == "docker" and not wanted
        if docker_down and subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode != 0:
            continue  # a docker CLI without a running daemon
        return name
    raise RayfleetError(
        "no container engine: install docker (with its daemon running) or podman, or set RAYFLEET_ENGINE"
    )


def revision() -> str:
    result = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip() or "dev"


def local_name(image: str, tag: str) -> str:
    return f"{LOCAL_PREFIX}/{image}:{tag}"


def host_pip_mounts(workdir: Path) -> tuple[list[str], list[str]]:
    """Volumes and build arguments so pip and uv inside a podman build see what pip on the host sees: a
    pip.conf (PIP_CONFIG_FILE), the same sources as uv's flags (UV_FLAGS: uv reads no pip configuration) and
    the host's CA bundle (HOST_CA_BUNDLE)."""
    settings = pip_config.settings()
    volumes, conf = [], configparser.ConfigParser()
    conf["global"] = {}
    paths = []
    for key in ("extra-index-url", "index-url", "find-links"):
        if key in settings:
            conf["global"][key] = settings[key]
            paths += [
                v.removeprefix("file://") for v in pip_config.values(settings[key]) if v.startswith(("/", "file://"))
            ]
    for path in sorted({str(Path(p).parent) if p.endswith("/simple") else p for p in paths}):
        if Path(path).exists():
            volumes += ["-v", f"{path}:{path}:ro"]
    uv_flags = " ".join(pip_config.uv_flags(dict(conf["global"])))  # the same sources, same paths inside
    args = []
    if CA_BUNDLE.exists():
        volumes += ["-v", f"{CA_BUNDLE}:/run/rayfleet/ca.crt:ro"]
        conf["global"]["cert"] = "/run/rayfleet/ca.crt"
        args += ["--build-arg", "HOST_CA_BUNDLE=/run/rayfleet/ca.crt"]
    if not conf["global"]:
        return [], []
    path = workdir / "pip.conf"
    with path.open("w") as handle:
        conf.write(handle)
    args += ["--build-arg", "PIP_CONFIG_FILE=/run/rayfleet/pip.conf", "--build-arg", f"UV_FLAGS={uv_flags}"]
    return [*volumes, "-v", f"{path}:/run/rayfleet/pip.conf:ro"], args


def build_plan(images: list[str]) -> list[str]:
    """What the build will build, said before the (long) build starts."""
    ray_base = ["ray-base (not pushed)"] if set(images) & set(RAY_IMAGES) else []
    return [f"building {', '.join([*ray_base, *images])}"]


def groups_with_models(outputs: str | None) -> list[str] | None:
    """The deployed worker groups that run the models image (None before the first deploy)."""
    try:
        return [name for name, group in Outputs.load(outputs).worker_groups.items() if group.models]
    except MissingOutputs:
        return None


def efa_installer(outputs: str | None, say=print) -> str | None:
    """The EFA installer version ray-worker is built with: none when EFA_INSTALLER_VERSION is set (passed as it
    is; "none" builds the plain worker); EFA_INSTALLER when a worker group of the deployment has EFA; else none,
    said, so a group with EFA never runs the plain worker unnoticed."""
    if os.environ.get("EFA_INSTALLER_VERSION"):
        return None
    try:
        out = Outputs.load(outputs)
    except MissingOutputs:
        say("ray-worker: the plain worker (no deployment yet: once `rayfleet deploy` has a worker group with EFA, "
            "build again and it gets the EFA installer)")  # fmt: skip
        return None
    efa = [name for name, group in out.worker_groups.items() if group.efa]
    if not efa:
        return None
    say(f"ray-worker: worker group(s) {', '.join(efa)} use EFA: AWS's EFA installer {EFA_INSTALLER} (libfabric, "
        "NCCL's OFI plugin) goes in; EFA_INSTALLER_VERSION=none builds the plain worker")  # fmt: skip
    return EFA_INSTALLER


def build(
    images: list[str], tag: str, models: list[str], say=print, efa: str | None = None, groups: list[str] | None = None
) -> list[str]:
    """Build `images`; with ray-worker and `models` (entries: image_models.chosen), also ray-worker:<tag>-models,
    the image of the worker groups with models (`groups`, for the plan's line)."""
    tool = engine()
    models = models if "ray-worker" in images else []
    for line in build_plan(images) + (image_models.plan(models, tag, groups) if "ray-worker" in images else []):
        say(line)
    # Checked before anything builds: a wrong model directory, or a disk too small, should not cost a base first.
    model_volumes, preloaded = image_models.mounts(",".join(models))
    image_models.check_disk(models, image_models.engine_store(tool) if models else None, say)
    with tempfile.TemporaryDirectory() as tmp:
        volumes, pip_args = host_pip_mounts(Path(tmp)) if tool == "podman" else ([], [])
        common = ["--build-arg", f"REVISION={revision()}", "--build-arg", f"VERSION={tag}", *pip_args, *volumes]
        for env_name in BUILD_ARGS_FROM_ENV:
            if os.environ.get(env_name) and os.environ[env_name] != "none":
                common += ["--build-arg", f"{env_name}={os.environ[env_name]}"]
        steps = [("ray-base", tag, [])] if set(images) & set(RAY_IMAGES) else []
        steps += [(image, tag, []) for image in images]
        if "ray-worker" in images:  # always, empty when no model is preloaded: the groups with models run it
            with_models = ["--build-arg", f"RAY_WORKER={local_name('ray-worker', tag)}", "--build-arg"]
            steps.append(("ray-worker", image_models.models_tag(tag), [*with_models, f"MODELS={preloaded}"]))
        for image, image_tag, extra in steps:
            args = [*common, "--build-arg", f"RAY_BASE={local_name('ray-base', tag)}", *extra]
            dockerfile = _dockerfile(image, image_tag != tag)
            if image_tag != tag:
                args += model_volumes
            if image == "ray-worker" and efa and image_tag == tag:
                args += ["--build-arg", f"EFA_INSTALLER_VERSION={efa}"]
            say(f"building {local_name(image, image_tag)} ...")
            started = time.monotonic()
            # docker format: OCI images would drop HEALTHCHECK and SHELL
            fmt = ["--format", "docker"] if tool == "podman" else []
            name = local_name(image, image_tag)
            command = [tool, "build", *fmt, "-f", str(dockerfile), "-t", name, *args, str(ROOT)]
            if subprocess.run(command).returncode != 0:
                raise RayfleetError(f"building {name} failed; the engine's output is above")
            say(f"built {name} in {time.monotonic() - started:.0f}s")
    built = [local_name(image, image_tag) for image, image_tag, _ in steps if image != "ray-base"]
    for line in size_report(tool, built):
        say(line)
    return built


def _dockerfile(image: str, models: bool) -> Path:
    if image == "ray-base":
        return ROOT / "images" / "base" / "ray.Dockerfile"
    return ROOT / "images" / image / ("models.Dockerfile" if models else "Dockerfile")


def _code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", "")


def mark_deployed(ecr, repositories: list[str], tag: str, say=print) -> int:
    """Tag each repository's image `<tag>` also `deployed-<tag>`, so the lifecycle never expires the image a
    service runs, and keep at most DEPLOYED_KEPT images so marked: the marks of the oldest-pushed others are
    removed (the image keeps its commit tag; BatchDeleteImage by tag removes only that tag), never the one just
    marked. Both tags are new or unchanged, so the repositories' immutable tags allow it. Returns how many
    images were marked; a repository without `<tag>` yet (deploy before the first push) is named and skipped:
    `make push` of the deployed tag marks it."""
    from botocore.exceptions import ClientError

    marked, mark = 0, f"{DEPLOYED_PREFIX}{tag}"
    for name in repositories:
        try:
            found = ecr.batch_get_image(repositoryName=name, imageIds=[{"imageTag": tag}])
        except ClientError as exc:
            if _code(exc) != "RepositoryNotFoundException":
                raise
            say(f"repository {name} does not exist: nothing to mark")
            continue
        if not found.get("images"):
            say(f"{name}:{tag} is not pushed yet: `rayfleet images push` marks it {mark} when it pushes it")
            continue
        image = found["images"][0]
        media = (
            {"imageManifestMediaType": image["imageManifestMediaType"]} if image.get("imageManifestMediaType") else {}
        )
        try:
            ecr.put_image(repositoryName=name, imageManifest=image["imageManifest"], imageTag=mark, **media)
        except ClientError as exc:  # already marked: the same image under the same tag
            if _code(exc) not in ("ImageAlreadyExistsException", "ImageTagAlreadyExistsException"):
                raise
        marked += 1
        pages = ecr.get_paginator("describe_images").paginate(repositoryName=name, filter={"tagStatus": "TAGGED"})
        images = [i for page in pages for i in page["imageDetails"]]
        flagged = [i for i in images if any(t.startswith(DEPLOYED_PREFIX) for t in i.get("imageTags", []))]
        others = sorted((i for i in flagged if mark not in i["imageTags"]), key=lambda i: i["imagePushedAt"])
        for old in others[: max(0, len(flagged) - DEPLOYED_KEPT)]:
            marks = [t for t in old["imageTags"] if t.startswith(DEPLOYED_PREFIX)]
            if len(marks) == len(old["imageTags"]):
                continue  # an image with no other tag would be deleted with its last one: leave it marked
            ecr.batch_delete_image(repositoryName=name, imageIds=[{"imageTag": t} for t in marks])
    if marked:
        say(f"marked {marked} image(s) {mark}: the ECR lifecycle never expires them")
    return marked


def push(images: list[str], tag: str, out: Outputs, say=print) -> list[str]:
    tool = engine()
    urls = out.ecr_repository_urls
    if not urls:
        raise RayfleetError(
            "the Terraform outputs have no ecr_repository_urls: re-run `rayfleet deploy` with this infra/"
        )
    missing = [i for i in images if i not in urls]
    if missing:
        raise RayfleetError(f"no ECR repository for {', '.join(missing)} in the outputs")
    tagged = [(image, tag) for image in images]
    if "ray-worker" in images:  # with its models image, which the groups with models run
        if not built_locally(tool, local_name("ray-worker", image_models.models_tag(tag))):
            raise RayfleetError(
                f"{local_name('ray-worker', image_models.models_tag(tag))} is not built (the image of the worker "
                f"groups with models): rayfleet images build --images ray-worker --tag {tag}"
            )
        if not model_cache.groups_from_s3(out) or image_models.groups_from_image(out):  # else it is staged, below
            tagged.append(("ray-worker", image_models.models_tag(tag)))
    ecr = Aws(out.region).client("ecr")
    auth = ecr.get_authorization_token()["authorizationData"][0]
    user, password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)
    registry = auth["proxyEndpoint"].removeprefix("https://")
    login = subprocess.run(
        [tool, "login", "--username", user, "--password-stdin", registry],
        input=password,
        capture_output=True,
        text=True,
    )
    if login.returncode != 0:
        raise RayfleetError(f"{tool} login to {registry} failed: {login.stderr.strip()[:300]}")
    pushed = []
    for image, image_tag in tagged:
        remote = f"{urls[image]}:{image_tag}"
        say(f"pushing {remote} ...")
        for command in ([tool, "tag", local_name(image, image_tag), remote], [tool, "push", remote]):
            if subprocess.run(command).returncode != 0:
                raise RayfleetError(
                    f"{' '.join(command[:2])} {image} failed (built? rayfleet images build --images {image})"
                )
        pushed.append(remote)
    if out.image_tag == tag:  # the tag the services run (deployed before its images were pushed): protect it
        mark_deployed(ecr, [urls[i].split("/", 1)[1] for i in images], tag, say=say)
        if ("ray-worker", image_models.models_tag(tag)) in tagged:
            mark_deployed(ecr, [urls["ray-worker"].split("/", 1)[1]],
                          image_models.models_tag(tag), say=say)  # fmt: skip
    if "ray-worker" in images and model_cache.groups_from_s3(out):
        pushed.append(model_cache.push_to_cache(tool, local_name("ray-worker", image_models.models_tag(tag)), out, say))
    return pushed


def built_locally(tool: str, name: str) -> bool:
    return subprocess.run([tool, "image", "inspect", name], capture_output=True).returncode == 0


def build_or_push(
    action: str,
    images: str | None = None,
    tag: str | None = None,
    models: str | None = None,
    outputs: str | None = None,
) -> int:
    """`rayfleet images build|push`: `images` a comma-separated subset (default all), `tag` default the git
    revision, `models` what the models image preloads (Hub ids or name=/dir; `none`; by default the built-in
    recipes' models: rayfleet/ops/image_models.py)."""
    chosen = [i.strip() for i in (images or ",".join(IMAGES)).split(",") if i.strip()]
    unknown = sorted(set(chosen) - set(IMAGES))
    if unknown:
        raise RayfleetError(f"unknown image(s) {', '.join(unknown)}; choose from {', '.join(IMAGES)}")
    tag = tag or revision()
    if action == "build":
        worker = "ray-worker" in chosen
        entries = image_models.chosen(models, ROOT) if worker else []
        efa = efa_installer(outputs) if worker else None
        build(chosen, tag, entries, efa=efa, groups=groups_with_models(outputs))
    else:
        push(chosen, tag, Outputs.load(outputs))
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.images", "rayfleet images build|push")
