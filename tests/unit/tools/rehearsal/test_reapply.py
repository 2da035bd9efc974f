"""Other Terraform variables applied to a running rehearsal in place (tools/rehearsal/reapply.py): the default
deployment switched to the GCS store's, as the rehearsal test does before its head-kill-on-store test. The
containers that then start: tests/integration/test_rehearsal.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from tools.rehearsal import reapply
from tools.rehearsal.cloud import Moto, deploy
from tools.rehearsal.host import Adaptation, Host
from tools.rehearsal.picture import deployment_picture

GATEWAY = "10.231.78.1"  # no interface's address: bound with IP_FREEBIND, as before the bridge exists


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="the store's stand-in is a redis-server")
def test_the_store_switched_on_in_place_registers_new_revisions_and_deploys_them(tmp_path):
    default = deployment_picture(image_tag="test")
    moto = Moto(0)
    rehearsal = None
    try:
        deployed = deploy(moto, default, tmp_path)
        agent = SimpleNamespace(
            cluster=deployed["cluster"],
            rendered_arns=dict(deployed["task_definitions"]),
            stand_in=None,
            adaptation=None,
        )
        rehearsal = SimpleNamespace(
            moto=moto,
            agent=agent,
            deployed=deployed,
            opts=SimpleNamespace(picture=default, state_dir=tmp_path),
            store=None,
            network={"gateway": GATEWAY},
            host=Host.here(),
        )
        ecs = moto.client("ecs")
        services = list(deployed["services"])
        before = {
            s["serviceName"]: (s["taskDefinition"], s["deployments"][0]["id"])
            for s in ecs.describe_services(cluster=agent.cluster, services=services)["services"]
        }
        (tmp_path / "store.tfvars").write_text("gcs_store = { enabled = true }\n")
        store = deployment_picture(var_files=[str(tmp_path / "store.tfvars")], image_tag="test")
        reapply.request(tmp_path, store)
        line = reapply.apply(rehearsal, reapply.pending(tmp_path))
        reapply.taken(tmp_path)
        assert reapply.pending(tmp_path) is None
        assert "new revisions of head, trainer, worker" in line and "GCS store: redis-server" in line, line
        assert agent.stand_in is rehearsal.store and isinstance(agent.adaptation, Adaptation)
        for key in ("head", "worker", "trainer"):
            assert agent.rendered_arns[key] != deployed["task_definitions"][key]
        assert agent.rendered_arns["control"] == deployed["task_definitions"]["control"]  # unchanged: not touched
        head = ecs.describe_task_definition(taskDefinition=agent.rendered_arns["head"])["taskDefinition"]
        env = {e["name"]: e["value"] for e in head["containerDefinitions"][0]["environment"]}
        assert env["RAYFLEET_GCS_STORE"] == "1" and env["RAY_REDIS_ADDRESS"].startswith("rediss://")
        (password,) = [
            s for s in head["containerDefinitions"][0]["secrets"] if s["name"] == "RAYFLEET_GCS_STORE_PASSWORD"
        ]
        # the store's secret exists in moto, seeded, and the head's execution role may read it (IAM enforced)
        execution = moto.client("secretsmanager", identity=head["executionRoleArn"].rsplit("/", 1)[-1])
        assert execution.get_secret_value(SecretId=password["valueFrom"])["SecretString"]
        after = {
            s["serviceName"]: (s["taskDefinition"], s["deployments"][0]["id"])
            for s in ecs.describe_services(cluster=agent.cluster, services=services)["services"]
        }
        changed = {name for name in after if after[name] != before[name]}
        workers = {g["service_name"] for g in deployed["outputs"]["worker_groups"].values()}
        assert changed == {deployed["outputs"]["head_service_name"], *workers} and len(workers) == 1
        outputs = {k: v["value"] for k, v in json.loads(Path(deployed["outputs_file"]).read_text()).items()}
        trainer = ecs.describe_task_definition(taskDefinition=agent.rendered_arns["trainer"])["taskDefinition"]
        assert outputs["trainer_task_definition"] == f"{trainer['family']}:{trainer['revision']}"
        assert outputs["gcs_store"]["replication_group_id"] and outputs["ecr_repository_urls"] == {}
    finally:
        if rehearsal is not None and rehearsal.store is not None:
            rehearsal.store.stop()
        moto.stop()
