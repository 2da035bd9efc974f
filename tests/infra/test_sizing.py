"""Shared memory, Ray's object store and the task's memory limit agree, and each worker task reserves all of
its instance's GPUs, for every instance type in the catalog: either the sizes fit, or the task definitions'
preconditions refuse the plan (evaluated here from the same Terraform expressions)."""

from __future__ import annotations

import json

import hcl2
import pytest

from tests.infra.hcl import INFRA, MODULES, Evaluator, load_dir, merged, resources

CATALOG = json.loads((INFRA / "catalog" / "instance_types.json").read_text())["instance_types"]
RAY = load_dir(MODULES / "ray")
LOCALS = merged(RAY, "locals")
TASKS = resources(RAY, "aws_ecs_task_definition")


def evaluator(head_type: str, worker_type: str, fraction: float = 0.3) -> Evaluator:
    def facts(t):
        return {k: CATALOG[t][k] for k in ("vcpus", "memory_mib", "gpus")}

    worker = {**facts(worker_type), "instance_type": worker_type, "count": 2, "efa": False}
    return Evaluator(LOCALS, {"head_node": facts(head_type), "worker_node": worker, "object_store_fraction": fraction})


def preconditions(task: str) -> list[str]:
    return [p["condition"] for p in TASKS[task]["lifecycle"][0]["precondition"]]


def plan_refuses(ev: Evaluator, task: str) -> bool:
    return not all(ev.value(c) for c in preconditions(task))


def shapes():
    root = merged(load_dir(INFRA), "variable")
    default_head = root["head_instance_type"]["default"]
    default_worker = "g5.xlarge"
    assert f'optional(string, "{default_worker}")' in root["workers"]["type"]
    with (INFRA / "fsdp.tfvars").open() as handle:
        fsdp_worker = hcl2.load(handle)["workers"]["instance_type"]
    return [("ddp-default", default_head, default_worker), ("fsdp", default_head, fsdp_worker)]


@pytest.mark.parametrize(("shape", "head", "worker"), shapes(), ids=lambda v: v if isinstance(v, str) else "")
def test_shipped_shapes_plan_and_fit(shape, head, worker):
    for fraction in (0.05, 0.3, 0.5):
        ev = evaluator(head, worker, fraction)
        for task in ("head", "worker", "trainer"):
            assert not plan_refuses(ev, task), (shape, task, fraction)
            size = ev.local("sizes")[task]
            assert size["object_store"] < size["shm"] <= size["memory"] - ev.local("process_floor_mib")
        assert ev.local("worker_memory_mib") + ev.local("sidecar_memory_mib") <= CATALOG[worker]["memory_mib"]
        head_total = ev.local("head_memory_mib") + ev.local("trainer_memory_mib")
        assert head_total <= CATALOG[head]["memory_mib"] * 0.9


@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_every_catalog_type_either_fits_or_is_refused(instance_type):
    ev = evaluator(instance_type, instance_type)
    for task in ("head", "trainer", "worker"):
        size = ev.local("sizes")[task]
        fits = size["shm"] + ev.local("process_floor_mib") <= size["memory"]
        refused = plan_refuses(ev, task)
        if task == "worker" and CATALOG[instance_type]["gpus"] == 0:
            assert refused, f"a worker on {instance_type} (no GPU) must be refused"
        else:
            assert fits != refused, (instance_type, task, size)


def test_a_too_small_head_is_refused():
    ev = evaluator("m5.large", "g5.xlarge")  # 8 GiB: the trainer's share cannot hold its store + 2 GiB
    assert plan_refuses(ev, "trainer")


def worker_container(ev: Evaluator) -> dict:
    container = LOCALS["worker_container"]
    assert container["environment"] == "${concat(local.ray_environment, local.worker_environment)}"
    env = {e["name"]: e["value"] for e in ev.local("worker_environment")}
    return {"resourceRequirements": ev.value(container["resourceRequirements"]), "env": env}


@pytest.mark.parametrize("instance_type", [t for t in sorted(CATALOG) if CATALOG[t]["gpus"] > 0])
def test_each_worker_task_reserves_and_announces_all_of_its_instances_gpus(instance_type):
    ev = evaluator("m5.xlarge", instance_type)
    gpus = CATALOG[instance_type]["gpus"]
    container = worker_container(ev)
    assert container["resourceRequirements"] == [{"type": "GPU", "value": str(gpus)}]
    assert container["env"]["RAYFLEET_NUM_GPUS"] == str(gpus)
    assert container["env"]["RAYFLEET_NUM_CPUS"] == str(CATALOG[instance_type]["vcpus"])


def test_head_and_trainer_reserve_no_gpu():
    for role in ("head_container", "trainer_container"):
        assert "resourceRequirements" not in LOCALS[role]
    assert "gpus            = local.head.gpus" in (INFRA / "main.tf").read_text()
