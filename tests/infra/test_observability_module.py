"""The observability module reads the same metric spec as the sidecar, and its dashboard is not stale.

The rendered alarm and dashboard are asserted by `terraform test` (infra/tests/data_plane.tftest.hcl)."""

from __future__ import annotations

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
