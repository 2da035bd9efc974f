"""Shared fixtures: a small generated FashionMNIST-format dataset; and the image build, started early."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from tests.images.helpers import BUILD, BackgroundBuild
from training.data import synthetic


def pytest_collection_finish(session):
    """Start building the images now when tests that use them were collected (the image tests, the
    rehearsal): the build takes minutes, and the unit and infra tests that run first leave a core free."""
    users = {"built_images", "running", "images"}  # tests/images' fixtures, and the rehearsal's
    wanted = any(users & set(getattr(item, "fixturenames", ())) for item in session.items)
    if not wanted or shutil.which("podman") is None or os.environ.get("RAYFLEET_IMAGES_PREBUILT"):
        return
    session.config.stash[BUILD] = BackgroundBuild(Path(tempfile.mkdtemp(prefix="rayfleet-image-build-")))


def pytest_sessionfinish(session):
    build = session.config.stash.get(BUILD, None)
    if build is not None:
        build.stop()


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory) -> Path:
    """2,400 train / 600 test images in torchvision's layout, generated once per test session."""
    root = tmp_path_factory.mktemp("fashion")
    synthetic.generate(root, train=2400, test=600, seed=1)
    return root
