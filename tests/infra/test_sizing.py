"""Shared memory, Ray's object store and the task's memory limit agree, and each worker task reserves all of
its instance's GPUs, for every instance type in the catalog: either the sizes fit, or the task definitions'
preconditions refuse the plan. The shipped shapes and the boundary refusals are asserted by Terraform itself
(infra/tests/*.tftest.hcl); this sweep over every catalog type stays in Python, evaluating the same
expressions, because a Terraform run per type would cost seconds each."""

from __future__ import annotations

import json

import pytest

from rayfleet.core.catalog import CATALOG_FILE
from tests.infra.hcl import MODULES, Evaluator, Namespace, load_dir, merged, resources

CATALOG = json.loads(CATALOG_FILE.read_text())["instance_types"]
RAY = load_dir(MODULES / "ray")
LOCALS = merged(RAY, "locals")
TASKS = resources(RAY, "aws_ecs_task_definition")


def facts(instance_type: str) -> dict:
    return {k: CATALOG[instance_type][k] for k in ("vcpus", "memory_mib", "gpus")}


def group(instance_type: str, name: str = "ddp") -> dict:
    """The ray module's worker_groups entry the root makes for a group of one type."""
    return {**facts(instance_type), "instance_type": instance_type, "node_group": f"worker-{name}", "min": 0, "max": 2}


def evaluator(head_type: str, groups: dict[str, str], fraction: float = 0.3, runs: int = 1) -> Evaluator:
    """groups: group name -> its instance type."""
    variables = {
        "head_node": facts(head_type),
        "worker_groups": {name: group(t, name) for name, t in groups.items()},
        "object_store_fraction": fraction,
        "concurrent_runs": runs,
    }
    return Evaluator(LOCALS, variables)


def preconditions(task: str) -> list[str]:
    return [p["condition"] for p in TASKS[task]["lifecycle"][0]["precondition"]]


def plan_refuses(ev: Evaluator, task: str, worker_group: str | None = None) -> bool:
    """Whether a precondition of the task definition fails; a worker group's (for_each) with its `each`."""
    scope = None
    if worker_group is not None:
        scope = {"each": Namespace({"key": worker_group, "value": ev.variables["worker_groups"][worker_group]})}
    return not all(ev.value(c, scope) for c in preconditions(task))


@pytest.mark.parametrize("runs", [1, 2, 3])
@pytest.mark.parametrize("instance_type", sorted(CATALOG))
def test_every_catalog_type_either_fits_or_is_refused(instance_type, runs):
    """`runs`: concurrent_runs, the drivers sharing the head instance."""
    ev = evaluator(instance_type, {"ddp": instance_type}, runs=runs)
    sizes = ev.local("sizes")
    for task, size, group_name in (
        ("head", sizes["head"], None),
        ("trainer", sizes["trainer"], None),
        ("worker", sizes["workers"]["ddp"], "ddp"),
    ):
        fits = size["shm"] + ev.local("process_floor_mib") <= size["memory"]
        refused = plan_refuses(ev, task, group_name)
        if task == "worker" and CATALOG[instance_type]["gpus"] == 0:
            assert refused, f"a worker on {instance_type} (no GPU) must be refused"
        else:
            assert fits != refused, (instance_type, task, size)


@pytest.mark.parametrize("instance_type", sorted(t for t in CATALOG if CATALOG[t]["gpus"]))
def test_a_groups_sizes_and_refusal_do_not_depend_on_the_other_groups(instance_type):
    """Each group's worker task is sized from its own type only: beside the default's two groups, a group of any
    type gets what it gets alone, and the other groups keep theirs (a precondition fails for that group only)."""
    alone = evaluator("m5.xlarge", {"x": instance_type})
    together = evaluator("m5.xlarge", {"ddp": "g5.xlarge", "fsdp": "g5.12xlarge", "x": instance_type})
    default = evaluator("m5.xlarge", {"ddp": "g5.xlarge", "fsdp": "g5.12xlarge"})
    x = alone.local("sizes")["workers"]["x"]
    assert together.local("sizes")["workers"] == {**default.local("sizes")["workers"], "x": x}
    assert default.local("sizes")["workers"] == {
        "ddp": {"memory": 14489, "shm": 5370, "object_store": 4346},
        "fsdp": {"memory": 176691, "shm": 54031, "object_store": 53007},
    }
    assert plan_refuses(together, "worker", "x") == plan_refuses(alone, "worker", "x")
    assert not plan_refuses(together, "worker", "ddp") and not plan_refuses(together, "worker", "fsdp")
