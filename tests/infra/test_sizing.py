"""Shared memory, Ray's object store and the task's memory limit agree, and each worker task reserves all of
its instance's GPUs, for every instance type in the catalog: either the sizes fit, or the task definitions'
preconditions refuse the plan. The shipped shapes and the boundary refusals are asserted by Terraform itself
(infra/tests/*.tftest.hcl); this sweep over every catalog type stays in Python, evaluating the same
expressions, because a Terraform run per type would cost seconds each."""

from __future__ import annotations

import json

import pytest

from rayfleet.core.catalog import CATALOG_FILE
from tests.infra.hcl import MODULES, Evaluator, load_dir, merged, resources

CATALOG = json.loads(CATALOG_FILE.read_text())["instance_types"]
RAY = load_dir(MODULES / "ray")
LOCALS = merged(RAY, "locals")
TASKS = resources(RAY, "aws_ecs_task_definition")


def evaluator(head_type: str, worker_type: str, fraction: float = 0.3, runs: int = 1) -> Evaluator:
    def facts(t):
        return {k: CATALOG[t][k] for k in ("vcpus", "memory_mib", "gpus")}

    worker = {**facts(worker_type), "instance_type": worker_type, "count": 2, "efa": False}
    variables = {"head_node": facts(head_type), "worker_node": worker, "object_store_fraction": fraction}
    return Evaluator(LOCALS, {**variables, "concurrent_runs": runs})


def preconditions(task: str) -> list[str]:
    return [p["condition"] for p in TASKS[task]["lifecycle"][0]["precondition"]]


def plan_refuses(ev: Evaluator, task: str) -> bool:
    return not all(ev.value(c) for c in preconditions(task))


@pytest.mark.parametrize("runs", [1, 2, 3])
@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_every_catalog_type_either_fits_or_is_refused(instance_type, runs):
    """`runs`: concurrent_runs, the drivers sharing the head instance."""
    ev = evaluator(instance_type, instance_type, runs=runs)
    for task in ("head", "trainer", "worker"):
        size = ev.local("sizes")[task]
        fits = size["shm"] + ev.local("process_floor_mib") <= size["memory"]
        refused = plan_refuses(ev, task)
        if task == "worker" and CATALOG[instance_type]["gpus"] == 0:
            assert refused, f"a worker on {instance_type} (no GPU) must be refused"
        else:
            assert fits != refused, (instance_type, task, size)
