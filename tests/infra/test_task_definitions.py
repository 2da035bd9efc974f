"""Issue 27 items 4, 5 and 9, checked on what Terraform renders (infra/ applied offline by the stand-in
providers), because checkov cannot look inside `jsonencode`d container definitions and passes its read-only
root and no-privilege checks vacuously:

  * every container of every task definition runs as a fixed non-root user, with no capability, with
    no-new-privileges, never privileged, on a read-only root file system, writing only to the volumes meant
    for it; no host path but the read-only /etc/rayfleet;
  * no role a job can run under (the task role of every task that runs a Ray node or a job's driver) may
    call ecs:UpdateService or write the head's snapshot under cluster/; the control task's role may both.

What this cannot check: IAM's own evaluation (moto does not evaluate resources or conditions of ECS
actions); the statements are matched here with IAM's wildcard rules, Allow only (the roles have no Deny).
"""

from __future__ import annotations

import copy
import fnmatch
import json

import pytest

from tools import rendered
from tools.terraform_standin.render import rendered_state

# plus /dev/shm (sharedMemorySize), which is a tmpfs
WRITABLE = {"/tmp", "/work", "/run/rayfleet", "/run/rayfleet-health"}
HOST_PATHS = {"/etc/rayfleet"}  # the instance's identity and Spot notice, read-only
# The S3 model cache's folder on the instance: written only by the model-cache container (which runs no job),
# read-only in the Ray worker.
MODEL_CACHE_HOST = "/opt/rayfleet/cache"
WRITABLE_HOST_PATHS = {("model-cache", MODEL_CACHE_HOST)}
TLS = "arn:aws:secretsmanager:us-east-1:123456789012:secret:acme/tls-AbCdEf"
SERVE = f'{{enabled = true, allowed_cidrs = ["10.0.0.0/8"], tls_secret_arn = "{TLS}"}}'
ONE_GROUP = '{default = {instance_types = ["g5.xlarge"], min = 2, max = 2}}'
S3_MODELS = (
    '{ddp = {instance_types = ["g5.xlarge"], max = 2}, fsdp = {instance_types = ["g5.12xlarge"], max = 2, '
    'efa = true, root_volume_gb = 300, models = true, models_from = "s3"}}'
)
SHAPES = {
    "default (ddp, and fsdp: EFA, host network)": {},
    "fsdp with the S3 model cache (the model-cache container)": {"variables": {"worker_groups": S3_MODELS}},
    "one group named default": {"variables": {"worker_groups": ONE_GROUP}},
    "serving with TLS (the serve-gate container)": {"variables": {"serve": SERVE}},
}


@pytest.fixture(scope="module", params=list(SHAPES))
def state(request) -> dict:
    return rendered_state(**SHAPES[request.param])


def violations(definition: dict) -> list[str]:
    """What lets a container of this task definition gain a privilege or write outside its volumes."""
    found = []
    volumes = {v["name"]: v for v in definition.get("volumes", [])}
    for c in definition["containerDefinitions"]:
        name = c["name"]
        user = str(c.get("user", ""))
        if not user.isdigit() or int(user) < 1000:
            found.append(f"{name}: user {user or '(the image default)'} is not a fixed non-root uid")
        if c.get("readonlyRootFilesystem") is not True:
            found.append(f"{name}: the root file system is writable")
        if c.get("privileged"):
            found.append(f"{name}: privileged")
        if "no-new-privileges" not in (c.get("dockerSecurityOptions") or []):
            found.append(f"{name}: no no-new-privileges")
        capabilities = (c.get("linuxParameters") or {}).get("capabilities") or {}
        if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
            found.append(f"{name}: capabilities {capabilities or 'as the engine grants them'}")
        for mount in c.get("mountPoints") or []:
            host = (volumes.get(mount["sourceVolume"], {}).get("host") or {}).get("sourcePath")
            if host and (name, host) in WRITABLE_HOST_PATHS:
                continue
            if host and (host not in HOST_PATHS | {MODEL_CACHE_HOST} or not mount.get("readOnly")):
                found.append(f"{name}: host path {host} mounted {'read-only' if mount.get('readOnly') else 'writable'}")
            elif not mount.get("readOnly") and mount["containerPath"] not in WRITABLE:
                found.append(f"{name}: writable {mount['containerPath']}")
    return found


def test_every_rendered_container_is_locked_down(state):
    picture = rendered.picture(state)
    assert set(picture["taskDefinitions"]) >= {"head", "trainer", "control"}
    # every task definition Terraform rendered, each worker group's too, is in the picture (none hides another)
    rendered_definitions = [r for r in rendered.resources(state) if r["type"] == "aws_ecs_task_definition"]
    assert len(picture["taskDefinitions"]) == len(rendered_definitions) == 3 + len(picture["outputs"]["worker_groups"])
    containers = [c["name"] for d in picture["taskDefinitions"].values() for c in d["containerDefinitions"]]
    assert ("serve-gate" in containers) == bool(picture["outputs"].get("serve_endpoint")), containers
    for key, definition in picture["taskDefinitions"].items():
        assert violations(definition) == [], key


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda c: c.update(user="0"), "user 0 is not a fixed non-root uid"),
        (lambda c: c.pop("user"), "user (the image default)"),
        (lambda c: c.update(readonlyRootFilesystem=False), "the root file system is writable"),
        (lambda c: c.update(privileged=True), "privileged"),
        (lambda c: c.update(dockerSecurityOptions=[]), "no no-new-privileges"),
        (lambda c: c["linuxParameters"].update(capabilities={"add": ["SYS_ADMIN"]}), "capabilities"),
        (lambda c: c["mountPoints"].append({"sourceVolume": "home", "containerPath": "/opt"}), "writable /opt"),
    ],
)
def test_the_check_refuses_a_container_that_can_gain_privileges(change, expected):
    """The check above can fail: the rendered trainer with one hole in it."""
    trainer = copy.deepcopy(rendered.picture(rendered_state())["taskDefinitions"]["trainer"])
    change(trainer["containerDefinitions"][0])
    assert any(expected in v for v in violations(trainer)), violations(trainer)


# -- roles --------------------------------------------------------------------------------------------------
def _allows(policy: dict, action: str, resource: str) -> bool:
    for s in policy["Statement"]:
        actions, resources = s.get("Action", []), s.get("Resource", [])
        actions = [actions] if isinstance(actions, str) else actions
        resources = [resources] if isinstance(resources, str) else resources
        if (
            s["Effect"] == "Allow"
            and any(fnmatch.fnmatchcase(action, a) for a in actions)
            and any(fnmatch.fnmatchcase(resource, r) for r in resources)
        ):
            return True
    return False


def role_policies(state: dict) -> dict[str, list[dict]]:
    """Role ARN -> the policy documents attached to it (inline; the deployment attaches no managed policy)."""
    roles = {r["values"]["name"]: r["values"]["arn"] for r in rendered.resources(state) if r["type"] == "aws_iam_role"}
    assert not [r for r in rendered.resources(state) if r["type"] == "aws_iam_role_policy_attachment"]
    found: dict[str, list[dict]] = {arn: [] for arn in roles.values()}
    for r in rendered.resources(state):
        if r["type"] == "aws_iam_role_policy":
            found[roles[r["values"]["role"]]].append(json.loads(r["values"]["policy"]))
    return found


def test_no_role_a_job_runs_under_can_scale_the_services_or_write_the_snapshot(state):
    """Before: the head task's role could UpdateService (any job can run in the head container) and every
    task role could write cluster/ray-status.json."""
    picture = rendered.picture(state)
    policies = role_policies(state)
    bucket, cluster = picture["bucket"]["name"], picture["cluster"]["clusterName"]
    snapshot = f"arn:aws:s3:::{bucket}/cluster/ray-status.json"
    services = [s["serviceName"] for s in picture["services"]]
    service_arns = [f"arn:aws:ecs:{picture['region']}:{picture['account']}:service/{cluster}/{s}" for s in services]
    job_roles = {d["taskRoleArn"] for key, d in picture["taskDefinitions"].items() if key != "control"}
    control = picture["taskDefinitions"]["control"]["taskRoleArn"]
    assert control not in job_roles and len(services) == 2 + len(picture["outputs"]["worker_groups"])  # head, control
    for role in job_roles:
        for document in policies[role]:
            assert not any(_allows(document, "ecs:UpdateService", arn) for arn in service_arns), role
            assert not _allows(document, "s3:PutObject", snapshot), role
            assert _allows(document, "s3:PutObject", f"arn:aws:s3:::{bucket}/runs/r/run.json")  # the check bites
    assert all(any(_allows(d, "ecs:UpdateService", arn) for d in policies[control]) for arn in service_arns)
    assert any(_allows(d, "s3:PutObject", snapshot) for d in policies[control])


def test_the_control_role_starts_waiting_trainers_and_nothing_else_and_no_job_can_queue_one(state):
    """Runs waiting for a driver slot (rayfleet/node/control/driver_dispatch.py): the control role may RunTask the
    trainer's task definition on its own cluster, passing only the roles a trainer has, never its own (a
    trainer with the control role would hand it to jobs) nor the head's or the workers' definitions; and
    no role a job runs under may write the RunTask requests it sends (cluster/launches/)."""
    picture = rendered.picture(state)
    policies = role_policies(state)
    bucket = picture["bucket"]["name"]
    definitions = picture["taskDefinitions"]
    control = definitions["control"]["taskRoleArn"]
    family = picture["taskDefinitionArns"]
    assert any(_allows(d, "ecs:RunTask", family["trainer"]) for d in policies[control])
    others = [key for key in family if key != "trainer"]  # head, control and every worker group's
    assert len(others) == 2 + len(picture["outputs"]["worker_groups"])
    for other in others:
        assert not any(_allows(d, "ecs:RunTask", family[other]) for d in policies[control]), other
    trainer_roles = {definitions["trainer"]["taskRoleArn"], definitions["trainer"]["executionRoleArn"]}
    assert all(any(_allows(d, "iam:PassRole", arn) for d in policies[control]) for arn in trainer_roles)
    assert not any(_allows(d, "iam:PassRole", control) for d in policies[control])
    launch = f"arn:aws:s3:::{bucket}/cluster/launches/r.json"
    assert any(_allows(d, "s3:PutObject", launch) for d in policies[control])
    job_roles = {d["taskRoleArn"] for key, d in definitions.items() if key != "control"}
    for role in job_roles:
        for document in policies[role]:
            assert not _allows(document, "s3:PutObject", launch), role
            assert not _allows(document, "ecs:RunTask", family["trainer"]), role


def test_the_worker_nodes_carry_the_group_label_that_the_laptop_names_their_group_by(state):
    """Each worker group's task's RAYFLEET_WORKER_GROUP is its Ray nodes' label (rayfleet/core/worker_groups.py):
    the group's name in the worker_groups output, which the laptop reads (ecs/outputs.py), so a recipe with
    `resources.group` is placed on the nodes that the submit check found; a group named default is the one group
    of earlier deployments' flat outputs (ecs/outputs.py LEGACY)."""
    from rayfleet.ecs.outputs import LEGACY

    picture = rendered.picture(state)
    services = {s["serviceName"]: s for s in picture["services"]}
    groups = picture["outputs"]["worker_groups"]
    assert groups
    for name, group in groups.items():
        definition = picture["taskDefinitions"][services[group["service_name"]]["taskDefinition"]]
        assert definition["family"] == group["service_name"]  # "<name>-ray-<node group>", both of them
        environment = {e["name"]: e.get("value") for c in definition["containerDefinitions"] for e in c["environment"]}
        assert environment["RAYFLEET_WORKER_GROUP"] == name
    if "default" in groups:
        assert LEGACY == "default"
