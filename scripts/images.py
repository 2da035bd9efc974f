"""Build the four images with docker or podman, and push them to the ECR repositories Terraform made.

    python -m scripts.images build [--images ray-head,trainer] [--tag TAG] [--models M]   # make build
    python -m scripts.images push  [--images ...] [--tag TAG]                             # make push

Images are tagged with the git revision (`--tag`, default `git rev-parse --short=12 HEAD`). ray-head,
ray-worker and trainer build FROM the shared `ray-base` (images/base/ray.Dockerfile), built first.
Bases: BASE_IMAGE (Ray images) and PYTHON_BASE_IMAGE (gpu-metrics) override the Dockerfiles' defaults,
which is how tests build on a local debootstrap base. With podman, the host's pip configuration (local
package indexes, the CA bundle of an intercepting proxy) is mounted for the build only, never copied
into a layer.
"""

from __future__ import annotations

import argparse
import base64
import configparser
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.aws import Aws, RayfleetError, run_cli
from scripts.tf_outputs import Outputs

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ("ray-head", "ray-worker", "trainer", "gpu-metrics")
RAY_IMAGES = ("ray-head", "ray-worker", "trainer")
LOCAL_PREFIX = "localhost/rayfleet"
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


def host_pip_mounts(workdir: Path) -> tuple[list[str], str | None]:
    """Volumes and a pip.conf so pip inside a podman build sees what pip on the host sees."""
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    settings = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        settings[key.split(".", 1)[-1]] = value.strip().strip("'")
    volumes, conf = [], configparser.ConfigParser()
    conf["global"] = {}
    paths = []
    for key in ("extra-index-url", "index-url", "find-links"):
        if key in settings:
            conf["global"][key] = settings[key]
            paths += [v.removeprefix("file://") for v in settings[key].split() if v.startswith(("/", "file://"))]
    for path in sorted({str(Path(p).parent) if p.endswith("/simple") else p for p in paths}):
        if Path(path).exists():
            volumes += ["-v", f"{path}:{path}:ro"]
    if CA_BUNDLE.exists():
        volumes += ["-v", f"{CA_BUNDLE}:/run/rayfleet/ca.crt:ro"]
        conf["global"]["cert"] = "/run/rayfleet/ca.crt"
    if not conf["global"]:
        return [], None
    path = workdir / "pip.conf"
    with path.open("w") as handle:
        conf.write(handle)
    return [*volumes, "-v", f"{path}:/run/rayfleet/pip.conf:ro"], "/run/rayfleet/pip.conf"


def model_mounts(models: str) -> tuple[list[str], str]:
    """name=/host/dir entries become mounts at /mnt/models-src/<name>; Hub ids pass through."""
    volumes, entries = [], []
    for entry in [e.strip() for e in models.split(",") if e.strip()]:
        if "=" in entry:
            name, path = entry.split("=", 1)
            host = Path(path).resolve()
            if not (host / "config.json").is_file():
                raise RayfleetError(f"--models {entry}: {host} is not a model directory (make text-data makes one)")
            volumes += ["-v", f"{host}:/mnt/models-src/{name}:ro"]
            entries.append(f"{name}=/mnt/models-src/{name}")
        else:
            entries.append(entry)
    return volumes, ",".join(entries)


def build(images: list[str], tag: str, models: str | None, say=print) -> list[str]:
    tool = engine()
    built = []
    with tempfile.TemporaryDirectory() as tmp:
        volumes, pip_conf = host_pip_mounts(Path(tmp)) if tool == "podman" else ([], None)
        common = ["--build-arg", f"REVISION={revision()}", "--build-arg", f"VERSION={tag}"]
        if pip_conf:
            common += ["--build-arg", f"PIP_CONFIG_FILE={pip_conf}", *volumes]
        for env_name in ("BASE_IMAGE", "PYTHON_BASE_IMAGE"):
            if os.environ.get(env_name):
                common += ["--build-arg", f"{env_name}={os.environ[env_name]}"]
        steps = [("ray-base", ROOT / "images" / "base" / "ray.Dockerfile")] if set(images) & set(RAY_IMAGES) else []
        steps += [(image, ROOT / "images" / image / "Dockerfile") for image in images]
        for image, dockerfile in steps:
            args = [*common, "--build-arg", f"RAY_BASE={local_name('ray-base', tag)}"]
            if image == "trainer" and models is not None:
                model_volumes, entries = model_mounts(models)
                args += ["--build-arg", f"MODELS={entries}", *model_volumes]
            say(f"building {local_name(image, tag)} ...")
            started = time.monotonic()
            # docker format: OCI images would drop HEALTHCHECK and SHELL
            fmt = ["--format", "docker"] if tool == "podman" else []
            command = [tool, "build", *fmt, "-f", str(dockerfile), "-t", local_name(image, tag), *args, str(ROOT)]
            if subprocess.run(command).returncode != 0:
                raise RayfleetError(f"building {image} failed; the engine's output is above")
            say(f"built {local_name(image, tag)} in {time.monotonic() - started:.0f}s")
            built.append(local_name(image, tag))
    return built


def push(images: list[str], tag: str, out: Outputs, say=print) -> list[str]:
    tool = engine()
    urls = out.ecr_repository_urls
    if not urls:
        raise RayfleetError("the Terraform outputs have no ecr_repository_urls: re-run `make deploy` with this infra/")
    missing = [i for i in images if i not in urls]
    if missing:
        raise RayfleetError(f"no ECR repository for {', '.join(missing)} in the outputs")
    auth = Aws(out.region).client("ecr").get_authorization_token()["authorizationData"][0]
    user, password = base64.b64decode(auth["authorizationToken"]).decode().split(":", 1)
    registry = auth["proxyEndpoint"].removeprefix("https://")
    login = subprocess.run([tool, "login", "--username", user, "--password-stdin", registry], input=password,
                           capture_output=True, text=True)  # fmt: skip
    if login.returncode != 0:
        raise RayfleetError(f"{tool} login to {registry} failed: {login.stderr.strip()[:300]}")
    pushed = []
    for image in images:
        remote = f"{urls[image]}:{tag}"
        say(f"pushing {remote} ...")
        for command in ([tool, "tag", local_name(image, tag), remote], [tool, "push", remote]):
            if subprocess.run(command).returncode != 0:
                raise RayfleetError(f"{' '.join(command[:2])} {image} failed (built? make build IMAGES={image})")
        pushed.append(remote)
    return pushed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scripts.images", description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["build", "push"])
    parser.add_argument("--images", default=",".join(IMAGES), help="comma-separated subset of " + ", ".join(IMAGES))
    parser.add_argument("--tag", default=None, help="default: the git revision")
    parser.add_argument("--models", default=None, help="trainer's MODELS build argument (Hub ids or name=/dir)")
    parser.add_argument("--outputs", help="Terraform outputs JSON (default: .rayfleet/outputs.json)")
    opts = parser.parse_args(argv)
    images = [i.strip() for i in opts.images.split(",") if i.strip()]
    unknown = sorted(set(images) - set(IMAGES))
    if unknown:
        raise RayfleetError(f"unknown image(s) {', '.join(unknown)}; choose from {', '.join(IMAGES)}")
    tag = opts.tag or revision()
    if opts.action == "build":
        build(images, tag, opts.models)
    else:
        push(images, tag, Outputs.load(opts.outputs))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
