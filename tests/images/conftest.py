"""Build the four images (and ray-worker's variant with a preloaded model) once per test session, for real,
with podman on a local debootstrap base (the default bases cannot be pulled here; the Dockerfiles are the same),
and hand tests testinfra hosts.

Without podman the image tests skip (`make test` installs it first: tools/system_deps.py), unless
RAYFLEET_REQUIRE_IMAGES=1 (set by .ci/run), where they fail.
podman itself, as a command, is in helpers.py."""

from __future__ import annotations

import os
import shutil
import uuid

import pytest

from tests.images.build import IMAGES, MODELS_IMAGE, ROOT, TAG, build_images
from tests.images.helpers import INSTALL, podman, wait_for_background_build

# testinfra's podman:// backend runs `podman exec` with this process's environment
os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "images" / "containers.conf"))


@pytest.fixture(scope="session")
def built_images(request, tmp_path_factory) -> dict[str, str]:
    if shutil.which("podman") is None:
        if os.environ.get("RAYFLEET_REQUIRE_IMAGES"):
            pytest.fail(f"podman is not installed, and RAYFLEET_REQUIRE_IMAGES=1 ({INSTALL})")
        pytest.skip(f"podman not installed: image tests need it ({INSTALL})")
    names = {name: f"localhost/rayfleet/{name}:{TAG}" for name in IMAGES}
    names[MODELS_IMAGE] = f"localhost/rayfleet/ray-worker:{TAG}-models"
    if os.environ.get("RAYFLEET_IMAGES_PREBUILT"):  # the images workflow built them on the real bases
        return names
    if not wait_for_background_build(request.config):  # started by tests/conftest.py when collected
        build_images(tmp_path_factory.mktemp("model"))
    return names


@pytest.fixture(scope="session")
def running(built_images):
    """One long-lived container per image (entry point replaced by sleep), as testinfra podman:// hosts."""
    import testinfra

    names = {}
    for image, ref in built_images.items():
        name = f"rf-test-{image}-{uuid.uuid4().hex[:6]}"
        podman("run", "-d", "--name", name, "--entrypoint", "sleep", ref, "infinity")
        names[image] = name
    hosts = {image: testinfra.get_host(f"podman://{name}") for image, name in names.items()}
    try:
        yield hosts
    finally:
        for name in names.values():
            podman("rm", "-f", "-t", "0", name, check=False)
