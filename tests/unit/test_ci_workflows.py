"""The GitHub workflows: third-party actions pinned by commit, and only the main-branch push job may assume
the AWS role (id-token: write)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / ".github" / "workflows").glob("*.yml"))


def _steps(workflow: dict):
    for name, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_action_is_pinned_by_commit(path):
    for job, step in _steps(yaml.safe_load(path.read_text())):
        if "uses" in step:
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", step["uses"]), f"{path.name} {job}: {step['uses']}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_only_the_push_job_on_main_gets_an_oidc_token(path):
    workflow = yaml.safe_load(path.read_text())
    assert "id-token" not in (workflow.get("permissions") or {}), f"{path.name}: id-token for every job"
    for name, job in workflow["jobs"].items():
        if (job.get("permissions") or {}).get("id-token") == "write":
            assert job.get("if") == "github.ref == 'refs/heads/main' && github.event_name == 'push'", name
            assert job.get("needs"), f"{path.name} {name}: pushes without the tests having passed"


def test_images_are_pushed_with_the_tag_deploy_uses():
    text = (WORKFLOWS[0].parent / "images.yml").read_text()
    assert "github.sha" not in text  # make's IMAGE_TAG (12 characters of the commit), as make deploy uses
