"""The EFA shape's facts (issue 15 item 9): the catalog's EFA device count per instance type, which the root
passes to the launch template (one EFA interface per device) and to the worker task (one uverbs device each);
GPUDirect RDMA only where the type has it. Terraform renders both in infra/tests/fsdp.tftest.hcl (the default's
fsdp group) and tests/infra/test_terraform_render.py."""

from __future__ import annotations

import json

import pytest

from rayfleet.core.catalog import CATALOG_FILE
from tests.infra.hcl import INFRA, load_dir, merged

CATALOG = json.loads(CATALOG_FILE.read_text())["instance_types"]
# Network cards with EFA per type (Amazon EC2 User Guide, "Supported instance types" for EFA, and the
# instance types' network specifications): one on g5/g6/g6e, 4 on p4d.24xlarge, 32 on p5.48xlarge.
EFA_DEVICES = {"p4d.24xlarge": 4, "p5.48xlarge": 32}
RDMA = {"p4d.24xlarge", "p5.48xlarge"}  # EFA with RDMA read: GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1)


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_every_type_says_how_many_efa_devices_it_has(instance_type):
    facts = CATALOG[instance_type]
    expected = EFA_DEVICES.get(instance_type, 1) if facts["efa"] else 0
    assert facts["efa_devices"] == expected
    assert facts["efa_rdma"] is (instance_type in RDMA)


def test_the_root_passes_the_catalogs_efa_facts_to_the_cluster_and_the_workers():
    """Per worker group (hcl2 keeps the root's for expressions as text): the group's facts are the catalog's of its
    first type (an EFA group has only one: infra/variables.tf), and only an EFA group passes its EFA devices on."""
    root = load_dir(INFRA)
    locals_ = merged(root, "locals")
    modules = merged(root, "module")
    workers = locals_["workers"]
    assert workers.startswith("${{for g , w in var.worker_groups : g => merge(local.catalog[w.instance_types[0]], w, {")
    node_groups = locals_["node_groups"]
    assert "{for g , w in local.workers : w.node_group => {" in node_groups
    assert '"efa_interfaces": "${w.efa ? w.efa_devices : 0}"' in node_groups
    worker_groups = modules["ray"]["worker_groups"]
    assert worker_groups.startswith("${{for g , w in local.workers : g => {")
    assert '"efa_devices": "${w.efa ? w.efa_devices : 0}"' in worker_groups
    assert '"efa_rdma": "${w.efa && w.efa_rdma}"' in worker_groups
    # the EFA security group exists when any group has EFA
    assert locals_["any_efa"] == "${anytrue([for w in values(var.worker_groups) : w.efa])}"
    assert modules["network"]["efa"] == "${local.any_efa}"
