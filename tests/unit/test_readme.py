"""The README documents what the Makefile offers: every target, and the test command CI runs."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def makefile_targets() -> set[str]:
    text = (REPO / "Makefile").read_text()
    return set(re.findall(r"^([a-z][a-z0-9-]*):.*?## ", text, flags=re.M))


def test_every_documented_target_is_phony_and_in_the_readme():
    text = (REPO / "Makefile").read_text().replace("\\\n", " ")  # join continued lines
    phony = set(" ".join(re.findall(r"^\.PHONY:(.*)$", text, flags=re.M)).split())
    readme = (REPO / "README.md").read_text()
    targets = makefile_targets()
    assert {"help", "setup", "demo", "train-ddp", "test", "lint", "bench-ddp", "cluster-up", "cluster-down"} <= targets
    assert targets <= phony
    missing = sorted(t for t in targets if f"| `{t}` |" not in readme)
    assert not missing, f"README's target table lacks {missing}"


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert "make test" in ci
    assert "make demo" in (REPO / "README.md").read_text() and "make test" in (REPO / "README.md").read_text()
