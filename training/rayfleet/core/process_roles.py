"""Which AWS identity runs which code: the map tests/infra/test_iam_grants.py uses to check that every AWS
call in rayfleet/ is granted to the role of the process that makes it, and that no role is granted more.

The roles are rayfleet/core/bucket.py's OPERATOR, CONTROL and TASK. By package, following where the code
runs (the layers of pyproject.toml):

    cli, ops, targets, ecs, local      OPERATOR  the `rayfleet` command on the operator's machine
    node, recipes, serve, train        TASK      the images: head, workers, trainer, and so every job
    monitoring (the GPU sidecar)       TASK      it runs in the worker tasks with the task role

core is used by every process: a core module's calls count for each role whose entry point imports it
(OPERATOR: rayfleet.cli.main; CONTROL: CONTROL_ENTRY; TASK: every other entry point of the image side).

CALLS_OF_MODULE names the modules whose AWS calls a different process makes than their package says: the
control task's own modules in node/ (their calls are the control task's), and cluster-side modules whose
AWS calls only the operator's verbs reach (the client is handed in by an operator's module). The test
checks each entry against the import graph, so a module cannot be declared to run where nothing imports it.
"""

from __future__ import annotations

from rayfleet.core.bucket import CONTROL, OPERATOR, TASK

CONTROL_ENTRY = "rayfleet.node.control.head_snapshot"  # the ray-control task's entry point (infra/modules/ray)
OPERATOR_ENTRY = "rayfleet.cli.main"  # the `rayfleet` command

PACKAGE_ROLE = {
    "rayfleet.cli": OPERATOR,
    "rayfleet.ops": OPERATOR,
    "rayfleet.targets": OPERATOR,
    "rayfleet.ecs": OPERATOR,
    "rayfleet.local": OPERATOR,
    "rayfleet.node": TASK,
    "rayfleet.recipes": TASK,
    "rayfleet.serve": TASK,
    "rayfleet.train": TASK,
    "monitoring": TASK,
}

CALLS_OF_MODULE: dict[str, frozenset[str]] = {
    # the control task's rounds (imported by CONTROL_ENTRY)
    "rayfleet.node.control.head_snapshot": frozenset({CONTROL}),
    "rayfleet.node.control.autostop": frozenset({CONTROL}),
    "rayfleet.node.control.queue_scaling": frozenset({CONTROL}),
    "rayfleet.node.control.driver_dispatch": frozenset({CONTROL}),
    # a worker only writes its drain message; the replacement (SetInstanceHealth) is the control task's
    "rayfleet.node.control.suspect": frozenset({CONTROL}),
    # make serve keeps and forgets the config; the control task reads it
    "rayfleet.core.serve_kept": frozenset({OPERATOR, CONTROL}),
    # make run stages a recipe's data: (only the deployer writes staged/)
    "rayfleet.recipes.stage": frozenset({OPERATOR}),
    # make run prices Spot workers with the operator's EC2 client
    "rayfleet.recipes.cost": frozenset({OPERATOR}),
    # Aws.check_cluster: the operator's verbs check the cluster exists
    "rayfleet.core.aws": frozenset({OPERATOR}),
}


def package_role(module: str) -> str | None:
    """The role a module's package runs as (None for core, which every process uses)."""
    for package, role in PACKAGE_ROLE.items():
        if module == package or module.startswith(package + "."):
            return role
    return None
