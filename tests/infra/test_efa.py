"""The EFA shape's facts (issue 15 item 9): the catalog's EFA device count per instance type, which the root
passes to the launch template (one EFA interface per device) and to the worker task (one uverbs device each);
GPUDirect RDMA only where the type has it. Terraform renders both in infra/tests/fsdp.tftest.hcl."""

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
    root = load_dir(INFRA)
    locals_ = merged(root, "locals")
    modules = merged(root, "module")
    worker_group = locals_["node_groups"]["worker"]
    assert worker_group["efa_interfaces"] == "${var.workers.efa ? local.worker.efa_devices : 0}"
    worker_node = modules["ray"]["worker_node"]
    assert worker_node["efa_devices"] == "${var.workers.efa ? local.worker.efa_devices : 0}"
    assert worker_node["efa_rdma"] == "${var.workers.efa && local.worker.efa_rdma}"
    assert modules["network"]["efa"] == "${var.workers.efa}"
