"""tests/tiers.py: which tier a test is in, the per-tier table `make test` ends with, and `--quick` and `--tier`."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
from _pytest.reports import TestReport

from tests import tiers


@pytest.mark.parametrize(
    ("nodeid", "fixtures", "tier"),
    [
        ("tests/unit/ecs/test_launch.py::test_x", ["tmp_path"], "unit"),
        ("tests/unit/test_readme.py::test_x@test_readme", [], "unit"),
        ("tests/infra/test_sizing.py::test_x[g5.xlarge]@test_sizing", [], "infra"),
        (
            "tests/integration/test_ddp_on_local_cluster.py::test_x@cluster",
            ["cluster_env", "ddp_basic"],
            "local cluster",
        ),
        ("tests/integration/test_recipe_run_on_ecs.py::test_x@cluster", ["ecs_moto", "cluster_env"], "local cluster"),
        ("tests/integration/test_rehearsal.py::test_x@images", ["images", "built_images"], "rehearsal"),
        ("tests/integration/test_rehearsal.py::test_no_fixture", [], "rehearsal"),
        ("tests/images/test_built_images.py::test_x@images", ["running", "built_images"], "images"),
        ("tests/images/test_dockerfiles.py::test_x@test_dockerfiles", [], "images"),
        ("tests/integration/test_ecs_verbs.py::test_x[a@b]@test_ecs_verbs", ["ecs_moto"], "moto"),
        ("tests/integration/test_autostop_on_moto.py::test_x", [], "moto"),
        ("tests/test_elsewhere.py::test_x", [], "other"),
    ],
)
def test_tier_of(nodeid, fixtures, tier):
    assert tiers.tier_of(nodeid, fixtures) == tier


@pytest.mark.parametrize(("seconds", "text"), [(0, "0:00"), (59.6, "1:00"), (2412.2, "40:12"), (3725, "62:05")])
def test_mmss(seconds, text):
    assert tiers.mmss(seconds) == text


def report(nodeid: str, when: str, start: float, stop: float, tier: str | None = None) -> TestReport:
    extra = {} if tier is None else {"rayfleet_tier": tier}
    return TestReport(nodeid, (nodeid, 0, "t"), {}, "passed", None, when, [], stop - start, start, stop, **extra)


def phases(nodeid: str, start: float, setup: float, call: float, teardown: float, tier=None) -> list[TestReport]:
    edges = [start, start + setup, start + setup + call, start + setup + call + teardown]
    return [report(nodeid, when, edges[i], edges[i + 1], tier) for i, when in enumerate(("setup", "call", "teardown"))]


def test_the_table_spans_each_tier_from_its_first_setup_to_its_last_teardown():
    cluster = "tests/integration/test_ddp_on_local_cluster.py::test_{}@cluster"
    reports = [
        *phases(cluster.format("a"), 1000, 60, 100, 0, tier="local cluster"),  # a fixture's setup: 60 s
        *phases(cluster.format("b"), 1160, 0, 200, 5, tier="local cluster"),
        *phases("tests/unit/test_readme.py::test_a@test_readme", 1000, 0, 1.5, 0),  # no tier: from its path
        *phases("tests/unit/test_readme.py::test_b@test_readme", 1010, 0, 2, 1),
    ]
    assert tiers.table(tiers.tally(reports), 2412) == [
        "tier            tests   wall span   test time",
        "local cluster       2        6:05        6:05",
        "rehearsal           0           -           -",
        "images              0           -           -",
        "moto                0           -           -",
        "unit                2        0:13        0:05",
        "infra               0           -           -",
        "session                     40:12",
    ]


def test_a_tier_outside_the_six_gets_its_own_row():
    lines = tiers.table(tiers.tally(phases("tests/test_x.py::test_x", 0, 0, 90, 0)), 90)
    assert lines[-2] == "other               1        1:30        1:30"


def test_the_tier_survives_the_trip_from_an_xdist_worker():
    sent = report("tests/images/test_built_images.py::test_x@images", "call", 0, 1, tier="images")
    received = TestReport._from_json(sent._to_json())
    assert received.rayfleet_tier == "images"
    assert tiers.tally([received])["images"].tests == {"tests/images/test_built_images.py::test_x"}


def test_quick_deselects_the_slow_tiers_and_tells_the_controller():
    deselected = []
    config = SimpleNamespace(
        getoption=lambda name: name == "quick",
        hook=SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)),
        workeroutput={},
    )
    items = [
        SimpleNamespace(nodeid="tests/unit/test_readme.py::test_x", fixturenames=[]),
        SimpleNamespace(nodeid="tests/integration/test_ecs_verbs.py::test_x@cluster", fixturenames=["cluster_env"]),
        SimpleNamespace(nodeid="tests/integration/test_ecs_verbs.py::test_y", fixturenames=["ecs_moto"]),
        SimpleNamespace(nodeid="tests/images/test_dockerfiles.py::test_x", fixturenames=[]),
        SimpleNamespace(nodeid="tests/integration/test_rehearsal.py::test_x@images", fixturenames=["images"]),
    ]
    kept = list(items)
    plugin = tiers.TierTimes(config)
    plugin.pytest_collection_modifyitems(config, kept)
    assert [item.nodeid for item in kept] == [items[0].nodeid, items[2].nodeid]
    assert deselected == [items[1], items[3], items[4]]
    assert config.workeroutput == {"rayfleet_quick_deselected": 3}

    controller = tiers.TierTimes(SimpleNamespace())
    for count in (3, 3):
        controller.pytest_testnodedown(SimpleNamespace(workeroutput={"rayfleet_quick_deselected": count}), None)
    assert controller.deselected == 3


def test_tier_keeps_only_the_tiers_named():
    config = SimpleNamespace(
        getoption=lambda name: ["local cluster", "images"] if name == "tier" else False,
        hook=SimpleNamespace(pytest_deselected=lambda items: None),
    )
    items = [
        SimpleNamespace(nodeid="tests/unit/test_readme.py::test_x", fixturenames=[]),
        SimpleNamespace(nodeid="tests/integration/test_ecs_verbs.py::test_x@cluster", fixturenames=["cluster_env"]),
        SimpleNamespace(nodeid="tests/images/test_dockerfiles.py::test_x", fixturenames=[]),
    ]
    kept = list(items)
    tiers.TierTimes(config).pytest_collection_modifyitems(config, kept)
    assert kept == items[1:]


def test_the_cpu_line_says_how_busy_the_machine_was(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3\n")  # user nice system idle iowait ...
    start = tiers.cpu_seconds(stat)
    stat.write_text("cpu  400 0 150 900 50 0 0 0 0 0\n")  # 400 ticks busy, 100 idle since
    stop = tiers.cpu_seconds(stat)
    tick = os.sysconf("SC_CLK_TCK")
    assert stop[0] - start[0] == pytest.approx(400 / tick) and stop[1] - start[1] == pytest.approx(100 / tick)
    assert tiers.cpu_line(start, stop).endswith("idle (80% busy)")
    assert tiers.cpu_seconds(tmp_path / "missing") is None and tiers.cpu_line(None, stop) is None
