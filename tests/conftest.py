"""Shared fixtures: a small generated FashionMNIST-format dataset; the image build, started early; and how
`make test` splits the session between two pytest-xdist workers."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from rayfleet.train.data import synthetic
from tests.images.build import ROOT
from tests.images.helpers import BUILD, BUILD_DIR_ENV, BackgroundBuild
from tests.tiers import CLUSTER_FIXTURES, IMAGE_FIXTURES, REHEARSAL_FIXTURES

# Tests that share a session resource that cannot be doubled run in one worker, as one xdist group
# (`--dist loadgroup --no-loadscope-reorder` keeps the order below: xdist hands each worker the next unit when
# it is almost out of tests).
#   "cluster", first: the local Ray cluster (fixed ports) and everything built on it, the long pole; its worker
#     takes nothing else until its last tests.
#   then every other module (unit, infra, moto), a module at a time (a module's fixtures are set up once);
#   "images", last: the image tests, then the podman rehearsal on the images they checked. By then the local
#     cluster's heaviest runs (DDP, FSDP, DeepSpeed: the first modules) are over; the two ran side by side
#     from the start once, and on two cores DeepSpeed's longest run and the rehearsal's token rotation failed.
#     The image build itself starts with the session (pytest_collection_finish below), beside everything.
# (name, the fixtures that put a test in it, its xdist group), in the order they run; None: the modules.
#   "local-cluster-alone": the one test that starts a cluster of its own, after the session cluster is stopped.
ORDER = [
    ("local-cluster", CLUSTER_FIXTURES, "cluster"),
    ("local-cluster-alone", {"session_cluster_stopped"}, "cluster"),
    None,
    ("images", IMAGE_FIXTURES, "images"),
    ("rehearsal", REHEARSAL_FIXTURES, "images"),
]
MODULES = ORDER.index(None)
ALONE = next(i for i, part in enumerate(ORDER) if part and part[0] == "local-cluster-alone")


def group_of(item) -> tuple[int, str]:
    """(order, xdist group): the last serial part whose fixtures it uses, else the test's module."""
    names = set(getattr(item, "fixturenames", ()))
    parts = [(order, part[2]) for order, part in enumerate(ORDER) if part is not None and part[1] & names]
    return parts[-1] if parts else (MODULES, Path(item.nodeid.split("::")[0]).stem)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    # An xdist worker sees --dist as "no" and its own `loadgroup` flag; the controller and one process see --dist.
    groups = {item: group_of(item) for item in items}
    if getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", "no") == "loadgroup":
        items.sort(key=lambda item: groups[item][0])  # stable: modules keep their order within a part
        for item in items:
            group_item(item, groups[item][1])
    else:  # one process: only the test that stops the session cluster moves, to the end
        items.sort(key=lambda item: groups[item][0] == ALONE)


def group_item(item, group: str) -> None:
    """What xdist's loadgroup does with an `xdist_group` mark: the group goes into the test id, where the
    controller's scheduler reads it. xdist 3.8 writes `item._nodeid`, which pytest 9.2 no longer reads (ids
    are NodeId objects in `_id`), so its grouping is silently lost; this sets the id pytest reads, and
    refuses to go on if that stops working, instead of letting two workers start the same local cluster."""
    from _pytest.nodeid import NodeId

    item.add_marker(pytest.mark.xdist_group(group))
    item._id = NodeId.parse(f"{item.nodeid}@{group}")
    if not item.nodeid.endswith(f"@{group}"):
        raise pytest.UsageError(f"cannot put {item.nodeid} into the xdist group {group}: see tests/conftest.py")


def pytest_collection_finish(session):
    """One process (no xdist): start building the images now when tests that use them were collected (the
    image tests, the rehearsal): the build takes minutes, and the tests that run first leave a core free."""
    if _xdist(session.config) or not _can_build():
        return
    users = IMAGE_FIXTURES | REHEARSAL_FIXTURES
    if any(users & set(getattr(item, "fixturenames", ())) for item in session.items):
        session.config.stash[BUILD] = BackgroundBuild(Path(tempfile.mkdtemp(prefix="rayfleet-image-build-")))


@pytest.hookimpl(tryfirst=True)  # before xdist starts the workers, which inherit BUILD_DIR_ENV
def pytest_sessionstart(session):
    """Under xdist (`make test`) the controller collects nothing, and a worker reaches the image tests only at
    its end: the controller starts the build as the session starts when the command line can reach the image
    tests or the rehearsal, and the workers wait on it by BUILD_DIR_ENV. Before this, the build ran in the
    images worker after its other tests, 11 minutes on the CI's longest lane instead of beside it."""
    config = session.config
    if hasattr(config, "workerinput") or not _xdist(config) or not _can_build() or not _may_reach_images(config):
        return
    build = BackgroundBuild(Path(tempfile.mkdtemp(prefix="rayfleet-image-build-")))
    config.stash[BUILD] = build
    os.environ[BUILD_DIR_ENV] = str(build.scratch)


def _xdist(config) -> bool:
    return hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", None))


def _can_build() -> bool:
    return shutil.which("podman") is not None and not os.environ.get("RAYFLEET_IMAGES_PREBUILT")


def _may_reach_images(config) -> bool:
    """Whether the command line selects the image tests or the rehearsal, judged before any collection: by
    its paths and tiers; `-k` or `-m` narrowing it builds nothing ahead (a test that needs the images still
    builds them itself)."""
    if config.getoption("quick") or config.option.keyword or config.option.markexpr:
        return False
    if (tiers := config.getoption("tier")) and not {"images", "rehearsal"} & set(tiers):
        return False
    users = [ROOT / "tests" / "images", ROOT / "tests" / "integration" / "test_rehearsal.py"]
    paths = [Path(config.invocation_params.dir, arg.split("::")[0]).resolve() for arg in config.args]
    return any(u == p or u.is_relative_to(p) or p.is_relative_to(u) for p in paths for u in users)


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
