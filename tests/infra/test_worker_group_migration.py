"""A deployment made before worker groups keeps its workers when it moves to `worker_groups`.

What it proves: infra/ as it was at PREVIOUS (the last commit with the single `workers` group) is applied
offline (the stand-in providers in render mode, as test_stop_then_plan.py does, keeping the state), in its two
shapes: its default (2 x g5.xlarge on demand) and its fsdp.tfvars (2 x g5.12xlarge, EFA, a placement group).
Then today's infra/ is planned against that state with the entry the refusal of those same `workers` prints
(`worker_groups = {"default": {...}}`, and the entry written out by hand). In the plan's `terraform show
-json`: no resource at all is created or destroyed, and the workers' launch template, Auto Scaling group,
capacity provider, ECS service and task definition (and placement group) are each the old resource (the
service and task definition at their new addresses through infra/moved.tf, `previous_address`), changed in no
attribute that makes the AWS provider replace it. The worker task definition is even unchanged (no new
revision, so the running workers are not restarted): the default group's rendered container definitions are
byte for byte the single group's. And infra/one-group.tfvars (a group named default, and the earlier head and
concurrent_runs, which today's defaults raise) planned against the earlier default deployment changes nothing
but the control task's definition (its RAYFLEET_WORKER_GROUPS).

What it cannot prove: the stand-in provider plans no replacement itself (it does not know the AWS provider's
ForceNew attributes), so a change to an attribute listed in FORCE_NEW below is counted as one here; attributes
missing from that list would go unnoticed. test_without_the_moved_blocks_the_service_and_task_definition_go
shows that the check fails when the old resources would be destroyed.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tools.terraform_standin.render import IMAGE_TAG, RENDER_ENV
from tools.terraform_standin.workspace import INFRA, REPO, Terraform, scratch_copy

PREVIOUS = "1f75267"  # the last commit whose infra/ had the single `workers` group (infra/moved.tf)
# infra/ reads these beside itself: the catalog, the images' Dockerfiles (their names), the metrics spec
PREVIOUS_PATHS = ("infra", "training/rayfleet/core/instance_types.json", "images", "monitoring/metrics.json")

# PREVIOUS's shapes: how it was applied, the same workers given to today's `workers` (to be refused), what the
# refusal must print of them, and the worker_groups entry written by hand.
SHAPES = {
    "default": {
        "previous": (),
        "workers": ("-var=workers={}",),  # PREVIOUS's default: workers = {} (2 x g5.xlarge)
        "printed": {"instance_types": ["g5.xlarge"], "max": 2, "spot": "on-demand"},
        "by_hand": '{default={instance_types=["g5.xlarge"],min=2,max=2}}',
        "placement_group": False,
    },
    "fsdp.tfvars": {
        "previous": ("-var-file=fsdp.tfvars",),
        "workers": ("-var-file={previous}/fsdp.tfvars",),
        "printed": {
            "instance_types": ["g5.12xlarge"],
            "max": 2,
            "spot": "on-demand",
            "efa": True,
            "root_volume_gb": 300,
        },
        "by_hand": '{default={instance_types=["g5.12xlarge"],min=2,max=2,efa=true,root_volume_gb=300}}',
        "placement_group": True,
    },
}

# The old single group's resources: address before -> address after (infra/moved.tf moves the ray module's two).
WORKER_RESOURCES = {
    **{
        f'module.cluster.{t}.this["worker"]': f'module.cluster.{t}.this["worker"]'  # the same key: not moved
        for t in ("aws_launch_template", "aws_autoscaling_group", "aws_ecs_capacity_provider")
    },
    "module.ray.aws_ecs_service.worker": 'module.ray.aws_ecs_service.worker["default"]',
    "module.ray.aws_ecs_task_definition.worker": 'module.ray.aws_ecs_task_definition.worker["default"]',
}
PLACEMENT_GROUP = 'module.cluster.aws_placement_group.this["worker"]'  # the EFA shape's
# Attributes whose change makes the AWS provider (5.x) replace the resource ("Forces new resource"); the task
# definition is replaced by a change to anything but these (a new revision: acceptable, see the tests below).
FORCE_NEW = {
    "aws_launch_template": {"name", "name_prefix"},
    "aws_autoscaling_group": {"name", "name_prefix"},
    "aws_ecs_capacity_provider": {"name", "auto_scaling_group_provider.auto_scaling_group_arn"},
    "aws_ecs_service": {"name", "cluster", "iam_role", "launch_type", "scheduling_strategy", "deployment_controller"},
    "aws_placement_group": {"name", "strategy", "partition_count", "spread_level"},
}
TASK_DEFINITION_IN_PLACE = {"tags", "tags_all", "skip_destroy", "track_latest"}


def _run(tf: Terraform, root: Path, *args: str):
    result = tf.run(root, *args, env=RENDER_ENV)
    assert result.returncode == 0, result.output[-6000:]
    return result


_applied: dict[str, Path] = {}


def applied(shape: str, tmp_path_factory) -> Path:
    """The state file of PREVIOUS's infra/ applied in one of SHAPES (once per session)."""
    if shape in _applied:
        return _applied[shape]
    known = subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS}^{{commit}}"], check=False)
    if known.returncode != 0:
        pytest.skip(f"commit {PREVIOUS} is not in this clone (shallow?): no earlier infra/ to migrate from")
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, *PREVIOUS_PATHS], capture_output=True, check=True
    ).stdout
    old = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(old, filter="data")
    tf = Terraform()
    init = tf.init(old / "infra")
    assert init.returncode == 0, init.output
    args = SHAPES[shape]["previous"]
    _run(tf, old / "infra", "apply", "-auto-approve", "-input=false", "-no-color", f"-var=image_tag={IMAGE_TAG}", *args)
    _applied[shape] = old / "infra" / "terraform.tfstate"
    return _applied[shape]


@pytest.fixture(scope="module", params=list(SHAPES))
def previous(request, tmp_path_factory) -> tuple[str, Path]:
    """(shape, the state file of PREVIOUS's infra/ applied in that shape)."""
    return request.param, applied(request.param, tmp_path_factory)


def plan_against(
    state: Path, directory: Path, *variables: str, source: Path = INFRA, var_files: tuple[str, ...] = ()
) -> dict:
    """`terraform show -json` of the plan of `source` (today's infra/) against a copy of `state`, given
    `-var=` each of `variables` and `-var-file=` each of `var_files` (in `source`)."""
    tf = Terraform()
    root = scratch_copy(directory, source=source)
    init = tf.init(root)
    assert init.returncode == 0, init.output
    shutil.copy(state, root / "terraform.tfstate")
    args = [f"-var=image_tag={IMAGE_TAG}", *(f"-var-file={f}" for f in var_files), *(f"-var={v}" for v in variables)]
    _run(tf, root, "plan", "-input=false", "-no-color", "-lock=false", "-out=migration.tfplan", *args)
    return json.loads(_run(tf, root, "show", "-json", "-no-color", "migration.tfplan").stdout)


def refusals_entry(tmp_path: Path, shape: str, state: Path) -> str:
    """The `worker_groups = ...` entry that today's refusal of PREVIOUS's `workers` (in that shape) prints."""
    tf = Terraform()
    root = scratch_copy(tmp_path / "refused")
    assert tf.init(root).returncode == 0
    workers = [a.replace("{previous}", str(state.parent)) for a in SHAPES[shape]["workers"]]
    refused = tf.run(root, "plan", "-input=false", "-no-color", "-json", f"-var=image_tag={IMAGE_TAG}", *workers)
    assert refused.returncode != 0, "setting the old `workers` variable must be refused"
    details = [
        m["diagnostic"].get("detail", "")
        for m in map(json.loads, refused.stdout.splitlines())
        if m.get("type") == "diagnostic" and m["diagnostic"]["severity"] == "error"
    ]
    entries = [e for d in details for e in re.findall(r"worker_groups = (\{.*\})", d)]
    assert len(entries) == 1, details
    return entries[0]


def _changed(before: dict, after: dict, prefix: str = "") -> set[str]:
    """Dotted names of the attributes that differ (nested blocks are lists of one object here)."""
    changed = set()
    for key in set(before or {}) | set(after or {}):
        b, a = (before or {}).get(key), (after or {}).get(key)
        if b == a:
            continue
        one = lambda v: v[0] if isinstance(v, list) and len(v) == 1 and isinstance(v[0], dict) else v  # noqa: E731
        if isinstance(one(b), dict) and isinstance(one(a), dict):
            changed |= _changed(one(b), one(a), f"{prefix}{key}.")
        changed.add(f"{prefix}{key}")
    return changed


def replaced_or_lost(plan: dict, placement_group: bool = False) -> list[str]:
    """What in the plan destroys, recreates or (for the AWS provider) replaces the old worker resources."""
    problems = []
    changes = {rc["address"]: rc for rc in plan["resource_changes"]}
    for rc in changes.values():
        actions = rc["change"]["actions"]
        if "create" in actions or "delete" in actions:
            problems.append(f"{rc['address']}: {'/'.join(actions)}")
    resources = {**WORKER_RESOURCES, **({PLACEMENT_GROUP: PLACEMENT_GROUP} if placement_group else {})}
    for old, new in resources.items():
        rc = changes.get(new)
        if rc is None:
            problems.append(f"{new}: not in the plan")
            continue
        if old != new and rc.get("previous_address") != old:
            problems.append(f"{new}: not moved from {old} (previous_address {rc.get('previous_address')})")
        if rc["change"]["actions"] != ["update"]:
            continue
        changed = _changed(rc["change"]["before"], rc["change"]["after"])
        if rc["type"] == "aws_ecs_task_definition":
            continue  # a new revision (the AWS provider replaces the definition): acceptable, see below
        forcing = changed & FORCE_NEW.get(rc["type"], set())
        if forcing:
            problems.append(f"{new}: {sorted(forcing)} change, which replaces it")
    return problems


@pytest.fixture(scope="module")
def refusal_printed(previous, tmp_path_factory) -> str:
    shape, state = previous
    return refusals_entry(tmp_path_factory.mktemp("refusal"), shape, state)


def test_the_refusal_of_the_old_workers_prints_the_one_group_that_keeps_them(previous, refusal_printed):
    """The same workers: one group named default (node group "worker", the old resources' key), of the same type,
    as many as the old count at most, on demand, with the old EFA and root volume. (Its min is the group's floor
    for autostop, in no resource's attributes: the services ignore desired_count after creation.)"""
    shape, _ = previous
    printed = json.loads(refusal_printed)
    assert list(printed) == ["default"]
    expected = SHAPES[shape]["printed"]
    assert {k: printed["default"].get(k) for k in expected} == expected
    assert set(printed["default"]) <= {*expected, "min", "placement_group"}, printed  # nothing else differs
    group = printed["default"]
    assert group.get("placement_group", group.get("efa", False)) is SHAPES[shape]["placement_group"]


def test_the_previous_state_holds_the_single_worker_group(previous):
    shape, state = previous
    addresses = {
        ".".join(filter(None, [r.get("module"), r["type"], r["name"]]))
        + (f'["{i["index_key"]}"]' if "index_key" in i else "")
        for r in json.loads(state.read_text())["resources"]
        if r["mode"] == "managed"
        for i in r["instances"]
    }
    assert set(WORKER_RESOURCES) <= addresses, sorted(set(WORKER_RESOURCES) - addresses)
    assert (PLACEMENT_GROUP in addresses) is SHAPES[shape]["placement_group"]
    assert not {a for a in addresses if "worker-" in a or '["default"]' in a}


@pytest.mark.parametrize("spelling", ["printed by the refusal", "by hand"])
def test_planning_worker_groups_default_keeps_every_worker_resource(previous, refusal_printed, tmp_path, spelling):
    shape, state = previous
    entry = refusal_printed if spelling == "printed by the refusal" else SHAPES[shape]["by_hand"]
    plan = plan_against(state, tmp_path / "current", f"worker_groups={entry}")
    assert replaced_or_lost(plan, SHAPES[shape]["placement_group"]) == []
    changes = {rc["address"]: rc["change"]["actions"] for rc in plan["resource_changes"]}
    for address in WORKER_RESOURCES.values():
        assert changes[address] in (["no-op"], ["update"]), (address, changes[address])


def test_the_workers_are_not_even_restarted(previous, tmp_path):
    """Stricter than the migration needs (a new task definition revision would be acceptable: the service rolls
    its workers onto it): today the default group renders the single group's task definition exactly, so the
    plan changes none of the worker resources, and the workers keep running."""
    shape, state = previous
    plan = plan_against(state, tmp_path / "current", f"worker_groups={SHAPES[shape]['by_hand']}")
    changes = {rc["address"]: rc for rc in plan["resource_changes"]}
    definition = changes['module.ray.aws_ecs_task_definition.worker["default"]']["change"]
    assert definition["actions"] == ["no-op"], sorted(_changed(definition["before"], definition["after"]))
    addresses = [*WORKER_RESOURCES.values(), *([PLACEMENT_GROUP] if SHAPES[shape]["placement_group"] else [])]
    assert {a: changes[a]["change"]["actions"] for a in addresses} == {a: ["no-op"] for a in addresses}


def test_one_group_tfvars_changes_nothing_of_the_previous_default_but_the_control_task(tmp_path_factory, tmp_path):
    """infra/one-group.tfvars is the earlier default deployment: its worker group, and its head and driver count
    (today's default head is larger: planned with worker_groups alone, the head's launch template and task
    definition change too). Only the control task gets a new definition, for its RAYFLEET_WORKER_GROUPS."""
    state = applied("default", tmp_path_factory)
    plan = plan_against(state, tmp_path / "current", var_files=("one-group.tfvars",))
    assert replaced_or_lost(plan) == []
    changed = {rc["address"]: rc for rc in plan["resource_changes"] if rc["change"]["actions"] != ["no-op"]}
    assert {a: rc["change"]["actions"] for a, rc in changed.items()} == {
        "module.ray.aws_ecs_task_definition.control": ["update"]
    }
    control = changed["module.ray.aws_ecs_task_definition.control"]["change"]
    before, after = (json.loads(control[k]["container_definitions"])[0]["environment"] for k in ("before", "after"))
    names = lambda environment: {e["name"] for e in environment}  # noqa: E731
    assert (names(before) - names(after), names(after) - names(before)) == (
        {"RAYFLEET_WORKER_SERVICE", "RAYFLEET_WORKER_NODE"},
        {"RAYFLEET_WORKER_GROUPS"},
    )


def test_without_the_moved_blocks_the_service_and_task_definition_go(previous, tmp_path):
    """The check above can fail: without infra/moved.tf the old service and task definition are destroyed and
    new ones created at the new addresses (ECS would stop the workers)."""
    shape, state = previous
    patched = tmp_path / "infra"
    shutil.copytree(INFRA, patched, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    (patched / "moved.tf").unlink()
    plan = plan_against(state, tmp_path / "current", f"worker_groups={SHAPES[shape]['by_hand']}", source=patched)
    assert sorted(replaced_or_lost(plan)) == sorted(
        [
            'module.ray.aws_ecs_service.worker["default"]: create',
            'module.ray.aws_ecs_service.worker["default"]: not moved from module.ray.aws_ecs_service.worker '
            "(previous_address None)",
            'module.ray.aws_ecs_task_definition.worker["default"]: create',
            'module.ray.aws_ecs_task_definition.worker["default"]: not moved from '
            "module.ray.aws_ecs_task_definition.worker (previous_address None)",
            "module.ray.aws_ecs_service.worker: delete",
            "module.ray.aws_ecs_task_definition.worker: delete",
        ]
    )


def test_a_force_new_change_counts_as_a_replacement():
    """The check's other half: an in-place update the AWS provider would turn into a replacement is refused."""
    asg = 'module.cluster.aws_autoscaling_group.this["worker"]'
    plan = {
        "resource_changes": [
            {
                "address": new,
                "type": new.split(".")[-2],
                "previous_address": old if old != new else None,
                "change": {"actions": ["no-op"], "before": {}, "after": {}},
            }
            for old, new in WORKER_RESOURCES.items()
        ]
    }
    rc = next(r for r in plan["resource_changes"] if r["address"] == asg)
    rc["change"] = {
        "actions": ["update"],
        "before": {"name_prefix": "rayfleet-worker-", "max_size": 2},
        "after": {"name_prefix": "rayfleet-worker-default-", "max_size": 2},
    }
    assert replaced_or_lost(plan) == [f"{asg}: ['name_prefix'] change, which replaces it"]
    rc["change"]["after"] = {"name_prefix": "rayfleet-worker-", "max_size": 3}  # in place: fine
    assert replaced_or_lost(plan) == []


def test_deploy_warns_before_today_s_defaults_destroy_an_earlier_default_deployment(tmp_path_factory, tmp_path):
    """A deployment made with the earlier defaults (it never set `workers`, so nothing refuses it) planned with
    today's defaults loses its worker group to the two new ones: `rayfleet deploy` says so before it asks, with
    the var file that keeps the workers."""
    from rayfleet.ops.deploy import plan_summary

    plan = plan_against(applied("default", tmp_path_factory), tmp_path / "current")
    assert plan_summary.destroyed_node_groups(plan) == ["worker"]
    lines = plan_summary.describe(plan)
    assert lines[1] == (
        "warning: the plan destroys the worker node group(s) worker and their instances; a deployment made before"
        " worker groups keeps its workers with TFVARS=one-group.tfvars"
    )
    kept = plan_against(applied("default", tmp_path_factory), tmp_path / "kept", var_files=("one-group.tfvars",))
    assert plan_summary.destroyed_node_groups(kept) == [] and not lines[0].endswith(" 0 to destroy")
