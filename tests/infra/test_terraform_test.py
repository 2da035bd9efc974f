"""`terraform test` of infra/tests/*.tftest.hcl, through the pinned Terraform, offline.

The test files plan and apply the root module (its defaults: the ddp and fsdp worker groups; and the worker
groups each file sets) and the modules with `mock_provider`s over the stand-in providers' schemas
(tools/terraform_standin), and assert on what Terraform renders: container definitions, security-group rules,
IAM statements, user data, refusals. One `terraform test -json` runs them all; each run block is reported here
as its own test, with Terraform's diagnostics when it fails.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tools.terraform_standin.workspace import INFRA, Terraform, scratch_copy

TEST_FILES = sorted((INFRA / "tests").glob("*.tftest.hcl"))
RUNS = [(f"tests/{f.name}", name) for f in TEST_FILES for name in re.findall(r'^run "([^"]+)"', f.read_text(), re.M)]


class Outcome:
    def __init__(self, messages: list[dict], output: str):
        self.messages = messages
        self.output = output

    @property
    def abstract(self) -> dict[str, list[str]]:
        return next((m["test_abstract"] for m in self.messages if m.get("type") == "test_abstract"), {})

    def status(self, path: str, run: str) -> str | None:
        done = [
            m["test_run"].get("status")
            for m in self.messages
            if m.get("type") == "test_run"
            and m["test_run"]["path"] == path
            and m["test_run"]["run"] == run
            and m["test_run"].get("progress") == "complete"
        ]
        return done[-1] if done else None

    def diagnostics(self, path: str | None = None, run: str | None = None) -> str:
        lines = []
        for m in self.messages:
            if m.get("type") != "diagnostic" or (path and m.get("@testfile") != path):
                continue
            if run and m.get("@testrun") not in (run, None):
                continue
            d = m["diagnostic"]
            r = d.get("range") or {}
            where = f"{r.get('filename')}:{r.get('start', {}).get('line')}: " if r else ""
            snippet = (d.get("snippet") or {}).get("code", "")
            values = "".join(
                f"\n    {v['traversal']} {v['statement']}" for v in (d.get("snippet") or {}).get("values", [])
            )
            lines.append(f"{where}{d['severity']}: {d['summary']}\n  {d.get('detail', '')}\n  {snippet}{values}")
        return "\n".join(lines)


@pytest.fixture(scope="module")
def outcome(tmp_path_factory) -> Outcome:
    tf = Terraform()
    root = scratch_copy(Path(tmp_path_factory.mktemp("terraform-test")))
    init = tf.init(root)
    assert init.returncode == 0, init.output
    result = tf.run(root, "test", "-json", "-no-color")
    messages = []
    for line in result.stdout.splitlines():
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError:
            messages.append({"type": "raw", "@message": line})
    return Outcome(messages, result.output)


def test_the_test_files_exist_and_terraform_found_every_run(outcome):
    assert TEST_FILES, "infra/tests/*.tftest.hcl"
    found = {(path, run) for path, runs in outcome.abstract.items() for run in runs}
    assert found == set(RUNS), f"terraform test found {sorted(found)}\n{outcome.output[-3000:]}"


@pytest.mark.parametrize(("path", "run"), RUNS, ids=[f"{Path(p).stem}:{r}" for p, r in RUNS])
def test_run_passes(outcome, path, run):
    status = outcome.status(path, run)
    assert status == "pass", (
        f"run {run!r} of {path}: {status}\n{outcome.diagnostics(path, run) or outcome.diagnostics()}"
    )


def test_no_errors_outside_the_runs(outcome):
    errors = [m for m in outcome.messages if m.get("type") == "diagnostic" and m["diagnostic"]["severity"] == "error"]
    assert not errors, outcome.diagnostics()
    summary = next((m for m in outcome.messages if m.get("type") == "test_summary"), None)
    assert summary and summary["test_summary"]["status"] == "pass", outcome.output[-3000:]
