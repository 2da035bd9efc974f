"""The observability module reads the same metric spec as the sidecar, and its dashboard is not stale.

A static check of the Terraform text (providers cannot be downloaded here; `terraform validate` runs in
the GitHub workflow of the infra issue)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from monitoring import dashboard
from monitoring import spec as metric_spec

MODULE = Path(__file__).resolve().parents[2] / "infra" / "modules" / "observability"


def test_module_has_the_standard_files():
    for name in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
        assert (MODULE / name).is_file(), name
    assert 'provider "aws"' not in (MODULE / "main.tf").read_text()  # providers only in the root


def test_every_variable_is_typed_and_described():
    text = (MODULE / "variables.tf").read_text()
    blocks = re.split(r"^variable ", text, flags=re.M)[1:]
    assert len(blocks) >= 5
    for block in blocks:
        assert "description" in block and "type" in block, block.splitlines()[0]


def test_module_reads_the_sidecar_spec_and_the_generated_dashboard():
    main_tf = (MODULE / "main.tf").read_text()
    spec_path = re.search(r'file\("\$\{path\.module\}/([^"]+)"\)', main_tf).group(1)
    assert (MODULE / spec_path).resolve() == metric_spec.SPEC_FILE
    assert 'templatefile("${path.module}/dashboard.json.tftpl"' in main_tf
    assert dashboard.main(["--check"]) == 0, "run: python -m monitoring.dashboard --write"


def test_idle_alarm_watches_a_cluster_rollup_the_sidecar_publishes():
    spec = metric_spec.load()
    alarm = spec.idle_alarm
    assert spec.metric(alarm["metric"]).rollup and alarm["statistic"] == "Maximum"
    main_tf = (MODULE / "main.tf").read_text()
    assert "dimensions          = { ClusterName = var.cluster_name }" in main_tf
    assert spec.cluster_dimensions == ("ClusterName",)
    assert 'treat_missing_data  = "notBreaching"' in main_tf


def test_template_is_valid_json_once_terraform_fills_it():
    text = (MODULE / "dashboard.json.tftpl").read_text()
    assert set(re.findall(r"\$\{(\w+)\}", text)) == {"cluster_name", "region"}
    assert "%{" not in text  # no template directives: plain substitution only
    body = json.loads(text.replace("${cluster_name}", "c").replace("${region}", "us-east-1"))
    assert len(body["widgets"]) == len(spec_widgets())
    assert not re.search(r"i-[0-9a-f]{8,}|A10G|H100", text)  # no instance ids, no GPU models


def spec_widgets() -> list:
    return dashboard.render(metric_spec.load())["widgets"]
