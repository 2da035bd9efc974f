"""A pytest plugin (`-p tests.tiers`, pyproject.toml): every run ends with a table of wall time per test tier,
so the CI budget shows in every log; `--quick` (make test-quick) runs only the fast tiers.

A test's tier comes from its path and fixtures (`tier_of`). It is decided where the test runs, and travels
on its reports: under xdist the controller collects nothing, it only receives the workers' reports."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

TIERS = ("local cluster", "rehearsal", "images", "moto", "unit", "infra")
SLOW = ("local cluster", "images", "rehearsal")  # what --quick leaves out
# The fixtures that put a test in a slow tier: also how tests/conftest.py orders and groups them for xdist.
CLUSTER_FIXTURES = frozenset({"cluster_env"})  # the session's local Ray cluster
IMAGE_FIXTURES = frozenset({"built_images", "running"})  # tests/images' built images
REHEARSAL_FIXTURES = frozenset({"images"})  # the rehearsal's images
GROUP = re.compile(r"@[\w.-]+$")  # the xdist group tests/conftest.py appends to a test id


def tier_of(nodeid: str, fixturenames=()) -> str:
    path = GROUP.sub("", nodeid).split("::")[0]
    names = set(fixturenames)
    if path.startswith("tests/unit/"):
        return "unit"
    if path.startswith("tests/infra/"):
        return "infra"
    if names & CLUSTER_FIXTURES:
        return "local cluster"
    if path == "tests/integration/test_rehearsal.py" or names & REHEARSAL_FIXTURES:
        return "rehearsal"
    if names & IMAGE_FIXTURES or path.startswith("tests/images/"):
        return "images"
    return "moto" if path.startswith("tests/integration/") else "other"


@dataclass
class Tier:
    tests: set = field(default_factory=set)
    start: float = float("inf")  # the first setup's start
    stop: float = 0.0  # the last teardown's stop
    seconds: float = 0.0  # setup + call + teardown, summed over its tests

    def add(self, report) -> None:
        self.tests.add(GROUP.sub("", report.nodeid))
        self.start, self.stop = min(self.start, report.start), max(self.stop, report.stop)
        self.seconds += report.duration


def tally(reports) -> dict[str, Tier]:
    tiers: dict[str, Tier] = {}
    for report in reports:
        tier = getattr(report, "rayfleet_tier", None) or tier_of(report.nodeid)
        tiers.setdefault(tier, Tier()).add(report)
    return tiers


def mmss(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 60}:{seconds % 60:02d}"


def table(tiers: dict[str, Tier], total: float) -> list[str]:
    lines = [f"{'tier':<14}{'tests':>7}{'wall span':>12}{'test time':>12}"]
    for name in TIERS + tuple(sorted(set(tiers) - set(TIERS))):
        tier = tiers.get(name) or Tier()
        span, summed = (mmss(tier.stop - tier.start), mmss(tier.seconds)) if tier.tests else ("-", "-")
        lines.append(f"{name:<14}{len(tier.tests):>7}{span:>12}{summed:>12}")
    lines.append(f"{'session':<14}{'':>7}{mmss(total):>12}")
    return lines


def cpu_seconds(stat: str = "/proc/stat") -> tuple[float, float] | None:
    """(busy, idle) CPU seconds of the whole machine since boot, all cores; None where there is no /proc."""
    try:
        fields = [int(v) for v in Path(stat).read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / tick, idle / tick


def cpu_line(start, stop) -> str | None:
    """How busy the machine was over the session: the CI budget is CPU on two cores, so idle seconds are
    room a better order of the tests could use, and busy ones are the cost to cut."""
    if start is None or stop is None:
        return None
    busy, idle = stop[0] - start[0], stop[1] - start[1]
    if busy + idle <= 0:
        return None
    return f"machine CPU: {busy:.0f} core-s busy, {idle:.0f} idle ({100 * busy / (busy + idle):.0f}% busy)"


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true", help="only the unit, infra and moto tiers (make test-quick)")
    parser.addoption("--tier", action="append", choices=TIERS, help="only this tier (repeatable), e.g. to time one")


def pytest_configure(config):
    config.pluginmanager.register(TierTimes(config), "rayfleet-tiers")


class TierTimes:
    def __init__(self, config):
        self.config, self.reports, self.deselected = config, [], 0
        self.began, self.cpu = time.time(), cpu_seconds()

    def pytest_collection_modifyitems(self, config, items):
        kept = config.getoption("tier") or (set(TIERS) - set(SLOW) if config.getoption("quick") else None)
        if kept is None:
            return
        slow = [item for item in items if tier_of(item.nodeid, getattr(item, "fixturenames", ())) not in kept]
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item not in slow]
        self.deselected = len(slow)
        if hasattr(config, "workeroutput"):  # an xdist worker: tell the controller
            config.workeroutput["rayfleet_quick_deselected"] = len(slow)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error):
        self.deselected = max(self.deselected, getattr(node, "workeroutput", {}).get("rayfleet_quick_deselected", 0))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        report.rayfleet_tier = tier_of(item.nodeid, item.fixturenames)
        return report

    def pytest_runtest_logreport(self, report):
        self.reports.append(report)

    @pytest.hookimpl(trylast=True)  # after --durations; pytest's short summary (-ra) still comes last
    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller prints the table
            return
        terminalreporter.write_sep("=", "wall time per tier (m:ss; tiers overlap under xdist)")
        for line in table(tally(self.reports), time.time() - self.began):
            terminalreporter.write_line(line)
        if line := cpu_line(self.cpu, cpu_seconds()):
            terminalreporter.write_line(line)
        if self.config.getoption("quick"):
            terminalreporter.write_line(f"--quick: deselected {self.deselected} tests ({', '.join(SLOW)})")
