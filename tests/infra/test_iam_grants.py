"""Every bucket prefix, secret, log group and AWS API the code uses is granted to the role of the process that
uses it, and nothing more (issue 54). Derived from the code's own constants (rayfleet/core/bucket.py, the
boto3 calls found in rayfleet/ and monitoring/ by tools/iam_scan.py, the module -> role map of
rayfleet/core/process_roles.py) and from the policies Terraform renders (tools/terraform_standin/render.py):
no hand-kept list of grants. A prefix added to bucket.py without its grant fails here, and so does an S3 key
spelled outside bucket.py.
"""

from __future__ import annotations

import fnmatch
import json

import pytest

from rayfleet.core import bucket, process_roles
from tools import iam_scan
from tools.rendered import resources
from tools.terraform_standin.render import rendered_state

ROLE_POLICY = {bucket.TASK: "task", bucket.CONTROL: "control"}  # aws_iam_role_policy names in infra/modules/iam
OBJECT_ACTIONS = {
    bucket.READ: ["s3:GetObject"],
    bucket.WRITE: ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
    bucket.DELETE: ["s3:DeleteObject"],
}
ACCESS_OF_ACTION = {a: access for access, actions in OBJECT_ACTIONS.items() for a in actions}
# Granted actions no rayfleet/ or monitoring/ call makes, and who makes them instead.
NOT_OUR_CALLS = {
    bucket.TASK: {
        "kms:Decrypt": "S3 and SNS, for objects and messages under the deployment's key (kms:ViaService)",
        "kms:GenerateDataKey": "S3, for objects under the deployment's key (kms:ViaService)",
        "kms:GenerateDataKey*": "SNS, for the encrypted notifications topic (kms:ViaService)",
        "ssmmessages:CreateControlChannel": "the ECS Exec agent (make exec)",
        "ssmmessages:CreateDataChannel": "the ECS Exec agent (make exec)",
        "ssmmessages:OpenControlChannel": "the ECS Exec agent (make exec)",
        "ssmmessages:OpenDataChannel": "the ECS Exec agent (make exec)",
        "logs:CreateLogStream": "the ECS Exec agent's session log",
        "logs:PutLogEvents": "the ECS Exec agent's session log",
        "logs:DescribeLogGroups": "the ECS Exec agent's session log",
        "logs:DescribeLogStreams": "the ECS Exec agent's session log",
        "s3:AbortMultipartUpload": "pyarrow's S3 filesystem (Ray Train's checkpoint uploads) aborts a failed one",
        "s3:ListMultipartUploadParts": "pyarrow's S3 filesystem (Ray Train's checkpoint uploads)",
    },
    bucket.CONTROL: {
        "kms:Decrypt": "S3, for objects under the deployment's key (kms:ViaService)",
        "kms:GenerateDataKey": "S3, for objects under the deployment's key (kms:ViaService)",
    },
}


@pytest.fixture(scope="module")
def state() -> dict:
    return rendered_state()


@pytest.fixture(scope="module")
def policies(state) -> dict[str, list[dict]]:
    found = {r["name"]: r for r in resources(state) if r["type"] == "aws_iam_role_policy"}
    return {role: json.loads(found[name]["values"]["policy"])["Statement"] for role, name in ROLE_POLICY.items()}


@pytest.fixture(scope="module")
def bucket_arn(state) -> str:
    return next(r["values"]["arn"] for r in resources(state) if r["type"] == "aws_s3_bucket")


def _listed(v) -> list:
    return v if isinstance(v, list) else [v]


def allows(statements: list[dict], action: str, resource: str, s3_prefix: str | None = None) -> bool:
    """IAM's Allow for one request, enough for these policies: action and resource by wildcard, and the one
    condition key a bucket listing carries (s3:prefix, StringLike); any other condition is taken as met."""
    for s in statements:
        if s["Effect"] != "Allow" or not any(fnmatch.fnmatchcase(action, a) for a in _listed(s["Action"])):
            continue
        if not any(fnmatch.fnmatchcase(resource, r) for r in _listed(s["Resource"])):
            continue
        like = s.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if like is not None and (s3_prefix is None or not any(fnmatch.fnmatchcase(s3_prefix, p) for p in like)):
            continue
        if s.get("Condition", {}).get("Null", {}).get("s3:prefix") == "true" and s3_prefix is not None:
            continue  # only a request that names no prefix: HeadBucket, a listing of no prefix
        return True
    return False


def effective(prefix: bucket.Prefix, role: str) -> frozenset[str]:
    """IAM grants by key prefix, so what a role may do under a prefix it may do under every key below it."""
    return frozenset().union(*(p.of(role) for p in bucket.LAYOUT if prefix.key.startswith(p.key)))


def _probe(prefix: bucket.Prefix) -> str:
    return prefix.key + "probe" if prefix.key.endswith("/") else prefix.key


@pytest.mark.parametrize("role", sorted(ROLE_POLICY))
def test_every_prefix_is_granted_as_declared_and_nothing_else(policies, bucket_arn, role):
    """Both ways for each prefix of bucket.LAYOUT: what the role does there is allowed, what it does not do is
    denied (a task writing staged/ or cluster/ would let a job plant what others trust)."""
    wrong = []
    for prefix in bucket.LAYOUT:
        access = effective(prefix, role)
        for what, actions in OBJECT_ACTIONS.items():
            for action in actions:
                allowed = allows(policies[role], action, f"{bucket_arn}/{_probe(prefix)}")
                # a writer needs PutObject; the multipart actions only where it writes large objects
                if allowed != (what in access) and (what in access) <= (action == actions[0]):
                    wrong.append(f"{role} {'may' if allowed else 'may not'} {action} on {prefix.key} ({prefix.why})")
        if prefix.key.endswith("/"):
            allowed = allows(policies[role], "s3:ListBucket", bucket_arn, prefix.key)
            if allowed != (bucket.LIST in access):
                wrong.append(f"{role} {'may' if allowed else 'may not'} s3:ListBucket {prefix.key} ({prefix.why})")
    assert not wrong, "rendered policy vs rayfleet/core/bucket.py:\n" + "\n".join(wrong)


@pytest.mark.parametrize("role", sorted(ROLE_POLICY))
def test_no_bucket_grant_outside_the_layout(policies, bucket_arn, role):
    """Every S3 grant of the role is a declared prefix with that access: no grant the contract does not name."""
    declared = {p.key: p.of(role) for p in bucket.LAYOUT}
    extra = []
    for s in policies[role]:
        for action in [a for a in _listed(s["Action"]) if a.startswith("s3:")]:
            if action == "s3:ListBucket" and s.get("Condition", {}).get("Null", {}).get("s3:prefix") == "true":
                grants = [] if role in bucket.FIND_BUCKET else [("<the bucket, no prefix: HeadBucket>", bucket.LIST)]
            elif action == "s3:ListBucket":
                like = s.get("Condition", {}).get("StringLike", {}).get("s3:prefix") or ["<no s3:prefix condition>"]
                grants = [(p.removesuffix("*"), bucket.LIST) for p in like]
            else:
                grants = [
                    (r.removeprefix(f"{bucket_arn}/").removesuffix("*"), ACCESS_OF_ACTION.get(action))
                    for r in _listed(s["Resource"])
                ]
            extra += [f"{s['Sid']}: {action} on {g!r}" for g, access in grants if access not in declared.get(g, ())]
    assert not extra, f"{role}'s S3 grants that rayfleet/core/bucket.py does not declare:\n" + "\n".join(extra)


def test_no_bucket_key_is_spelled_outside_bucket_py():
    literals = iam_scan.bucket_key_literals()
    found = [f"{path}:{line}: {literal!r}" for path, line, literal in literals]
    assert not found, (
        "bucket keys spelled outside rayfleet/core/bucket.py (import its constant, so the grant check sees "
        "every prefix):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("role", sorted(ROLE_POLICY))
def test_every_api_call_of_the_role_is_granted(policies, role):
    used = iam_scan.actions_by_role()[role]
    missing = [
        f"{action} ({', '.join(where[:3])})"
        for action, where in sorted(used.items())
        if not any(any(fnmatch.fnmatchcase(action, a) for a in _listed(s["Action"])) for s in policies[role])
    ]
    assert not missing, f"the code calls these as {role}, and its rendered policy does not grant them:\n" + "\n".join(
        missing
    )


@pytest.mark.parametrize("role", sorted(ROLE_POLICY))
def test_no_action_is_granted_that_nothing_uses(policies, role):
    used = set(iam_scan.actions_by_role()[role]) | set(NOT_OUR_CALLS[role])
    granted = {a for s in policies[role] for a in _listed(s["Action"])}
    assert not granted - used, f"{role} is granted actions no code of its process calls: {sorted(granted - used)}"


def test_the_control_task_runs_the_declared_entry_point(state):
    """process_roles.CONTROL_ENTRY is what the rendered control task runs, so the role map follows the code."""
    defs = [r["values"] for r in resources(state) if r["type"] == "aws_ecs_task_definition"]
    entries = [c.get("entryPoint") for d in defs for c in json.loads(d["container_definitions"])]
    assert ["python", "-m", process_roles.CONTROL_ENTRY] in entries


def test_every_module_declared_to_run_elsewhere_is_reached_from_that_process():
    known = iam_scan.modules()
    reach = {r: iam_scan.closure(sorted(e), known) for r, e in iam_scan.entry_points(known).items()}
    wrong = [f"{m} ({r})" for m, roles in process_roles.CALLS_OF_MODULE.items() for r in roles if m not in reach[r]]
    assert not wrong, f"declared in process_roles.CALLS_OF_MODULE, but that process never imports them: {wrong}"


def test_secrets_and_log_groups_of_the_task_definitions_are_granted(state):
    """What ECS reads for a task (its secrets, its awslogs group) with the execution role is granted to it."""
    execution = json.loads(
        next(r for r in resources(state) if r["type"] == "aws_iam_role_policy" and r["name"] == "execution")["values"][
            "policy"
        ]
    )["Statement"]
    missing = []
    for d in [r["values"] for r in resources(state) if r["type"] == "aws_ecs_task_definition"]:
        for c in json.loads(d["container_definitions"]):
            for secret in c.get("secrets") or []:
                arn = secret["valueFrom"].split(":::")[0] if secret["valueFrom"].count(":") > 6 else secret["valueFrom"]
                if not allows(execution, "secretsmanager:GetSecretValue", arn):
                    missing.append(f"{d['family']}/{c['name']}: secret {secret['valueFrom']}")
            group = (c.get("logConfiguration") or {}).get("options", {}).get("awslogs-group")
            region_account = "arn:aws:logs:us-east-1:123456789012"
            if group and not allows(execution, "logs:PutLogEvents", f"{region_account}:log-group:{group}:log-stream:x"):
                missing.append(f"{d['family']}/{c['name']}: log group {group}")
    assert not missing, "the execution role cannot read or write:\n" + "\n".join(missing)


def test_replace_bad_instance_names_the_worker_groups_exactly(state, policies):
    """issue 54 R3, at the root: the control role's SetInstanceHealth names each worker group's Auto Scaling
    group by its full name, and not the head's."""
    groups = {r["index"]: r["values"]["name"] for r in resources(state) if r["type"] == "aws_autoscaling_group"}
    statement = next(s for s in policies[bucket.CONTROL] if "autoscaling:SetInstanceHealth" in _listed(s["Action"]))
    names = sorted(r.rsplit("autoScalingGroupName/", 1)[1] for r in _listed(statement["Resource"]))
    assert names == sorted(n for k, n in groups.items() if k != "head"), statement


def test_the_committed_operator_policy_is_the_generated_one():
    """infra/operator-policy.json (docs/install.md) is `python -m tools.operator_policy`'s output; every resource
    type Terraform renders has its actions mapped (a new type without them fails here)."""
    from tools import operator_policy
    from tools.terraform_standin.workspace import INFRA

    types = operator_policy.rendered_types()
    assert types <= set(operator_policy.TERRAFORM_ACTIONS), sorted(types - set(operator_policy.TERRAFORM_ACTIONS))
    committed = json.loads((INFRA / "operator-policy.json").read_text())
    assert committed == operator_policy.policy(types), (
        "run: python -m tools.operator_policy > infra/operator-policy.json"
    )


@pytest.mark.parametrize("role", sorted(ROLE_POLICY))
def test_the_roles_that_write_runs_through_ray_train_may_find_the_bucket(policies, bucket_arn, role):
    """Ray Train's storage check sends HeadBucket, which AWS authorizes as s3:ListBucket with no s3:prefix in the
    request: a listing grant limited by an s3:prefix condition alone refuses it (a condition key that is absent
    matches no StringLike), so every run's controller would fail on AWS; moto cannot see it (its policies lose
    their conditions)."""
    assert allows(policies[role], "s3:ListBucket", bucket_arn, None) == (role in bucket.FIND_BUCKET)
