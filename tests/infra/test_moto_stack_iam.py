"""What the moto stack's one transformation of the rendered IAM policies removes (tools/moto_stack/iam.py
for_moto), pinned on Terraform's own rendering of infra/, so what moto cannot judge is written down here and
checked nowhere else: moto 5.2 evaluates resources only for S3 and no condition key at all.

The moto tier enforces everything else (tests/integration: every call under its role). When a policy gains
a condition or a non-S3 resource, this table grows with it: that part is then AWS's alone to enforce (or
a tests/infra check of its own, as tests/infra/test_task_definitions.py does for the task roles).
"""

from __future__ import annotations

import json
import re

import pytest

from tools.moto_stack import iam, stack

# (role, Sid, what is dropped): a condition as JSON, or the non-S3 resources widened to "*" (ARNs shortened to
# "<service>:<resource>", service names to "<service>": the region and account are the rendering's).
DROPPED = {
    ("rayfleet-control-task", "ScaleOwnServices", '{"ArnEquals": {"ecs:cluster": "ecs:cluster/rayfleet"}}'),
    (
        "rayfleet-control-task",
        "ScaleOwnServices",
        (
            "ecs:service/rayfleet/rayfleet-ray-control",
            "ecs:service/rayfleet/rayfleet-ray-head",
            "ecs:service/rayfleet/rayfleet-ray-worker",
        ),
    ),
    ("rayfleet-control-task", "FindOwnContainerInstance", ("ecs:cluster/rayfleet",)),
    ("rayfleet-control-task", "DrainOwnContainerInstance", ("ecs:container-instance/rayfleet/*",)),
    (
        "rayfleet-control-task",
        "ReplaceBadInstance",
        ("autoscaling:autoScalingGroup:*:autoScalingGroupName/rayfleet-worker-<unique suffix>",),
    ),
    ("rayfleet-control-task", "SeeOwnTrainerTasks", '{"ArnEquals": {"ecs:cluster": "ecs:cluster/rayfleet"}}'),
    ("rayfleet-control-task", "SeeOwnWorkerTasks", '{"ArnEquals": {"ecs:cluster": "ecs:cluster/rayfleet"}}'),
    ("rayfleet-control-task", "SeeOwnWorkerTasks", ("ecs:task/rayfleet/*",)),
    ("rayfleet-control-task", "ListTheQueue", '{"StringLike": {"s3:prefix": ["queue/", "queue/*"]}}'),
    ("rayfleet-control-task", "StartWaitingTrainers", '{"ArnEquals": {"ecs:cluster": "ecs:cluster/rayfleet"}}'),
    ("rayfleet-control-task", "StartWaitingTrainers", ("ecs:task-definition/rayfleet-trainer:*",)),
    ("rayfleet-control-task", "TagStartedTrainers", '{"StringEquals": {"ecs:CreateAction": "RunTask"}}'),
    ("rayfleet-control-task", "TagStartedTrainers", ("ecs:task/rayfleet/*",)),
    (
        "rayfleet-control-task",
        "PassTrainerRoles",
        '{"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}',
    ),
    ("rayfleet-control-task", "PassTrainerRoles", ("iam:role/rayfleet-task", "iam:role/rayfleet-task-execution")),
    ("rayfleet-control-task", "ListWaitingLaunches", '{"StringLike": {"s3:prefix": ["cluster/launches/*"]}}'),
    ("rayfleet-control-task", "BucketKey", '{"StringEquals": {"kms:ViaService": "s3"}}'),
    ("rayfleet-control-task", "BucketKey", ("kms:key/22239c97-4471-4b98-bebe-e6687eb9ef9a",)),
    (
        "rayfleet-task-execution",
        "PullOwnImages",
        (
            "ecr:repository/rayfleet/gpu-metrics",
            "ecr:repository/rayfleet/ray-head",
            "ecr:repository/rayfleet/ray-worker",
            "ecr:repository/rayfleet/trainer",
        ),
    ),
    ("rayfleet-task-execution", "Logs", ("logs:log-group:/rayfleet/rayfleet/*:*",)),
    ("rayfleet-task-execution", "RayToken", ("secretsmanager:secret:rayfleet/ray-auth-token-*",)),
    ("rayfleet-task-execution", "ServeApiKey", ("secretsmanager:secret:rayfleet/serve-api-key-*",)),
    (
        "rayfleet-task-execution",
        "DecryptTokenAndImages",
        '{"StringEquals": {"kms:ViaService": ["secretsmanager", "ecr"]}}',
    ),
    ("rayfleet-task-execution", "DecryptTokenAndImages", ("kms:key/22239c97-4471-4b98-bebe-e6687eb9ef9a",)),
    ("rayfleet-instance", "AgentOfThisCluster", ("ecs:cluster/rayfleet",)),
    ("rayfleet-instance", "AgentOfItsInstances", ("ecs:container-instance/rayfleet/*",)),
    (
        "rayfleet-instance",
        "PullOwnImages",
        (
            "ecr:repository/rayfleet/gpu-metrics",
            "ecr:repository/rayfleet/ray-head",
            "ecr:repository/rayfleet/ray-worker",
            "ecr:repository/rayfleet/trainer",
        ),
    ),
    ("rayfleet-instance", "Logs", ("logs:log-group:/rayfleet/rayfleet/*:*",)),
    (
        "rayfleet-task",
        "ListOwnPrefixes",
        '{"StringLike": {"s3:prefix": ["runs/", "data/", "queue/", "runs/*", "data/*", "queue/*"]}}',
    ),
    ("rayfleet-task", "FindTheBucket", '{"Null": {"s3:prefix": "true"}}'),  # moto: lists the whole bucket too
    ("rayfleet-task", "BucketKey", '{"StringEquals": {"kms:ViaService": "s3"}}'),
    ("rayfleet-task", "BucketKey", ("kms:key/22239c97-4471-4b98-bebe-e6687eb9ef9a",)),
    ("rayfleet-task", "NotifyRuns", ("sns:rayfleet-notifications",)),
    ("rayfleet-task", "NotifyThroughTheEncryptedTopic", '{"StringEquals": {"kms:ViaService": "sns"}}'),
    ("rayfleet-task", "NotifyThroughTheEncryptedTopic", ("kms:key/22239c97-4471-4b98-bebe-e6687eb9ef9a",)),
    ("rayfleet-task", "GpuMetrics", '{"StringEquals": {"cloudwatch:namespace": "rayfleet"}}'),
    ("rayfleet-task", "EcsExecSessionLog", ("logs:log-group:/rayfleet/rayfleet/*:*",)),
    ("rayfleet-task", "EcsExecLogKey", ("kms:key/22239c97-4471-4b98-bebe-e6687eb9ef9a",)),
    ("rayfleet-task", "RecipeSecrets", ("secretsmanager:secret:rayfleet/recipes/*",)),
    ("rayfleet-task", "RecipeParameters", ("ssm:parameter/rayfleet/recipes/*",)),
    ("rayfleet-task", "ListReadOnlyPrefixes", '{"StringLike": {"s3:prefix": ["staged/", "staged/*"]}}'),
    ("rayfleet-vpc-flow-logs", "#0", ("logs:log-group:/rayfleet/rayfleet/vpc-flow-logs:*",)),
}


def _short(text: str) -> str:
    text = re.sub(r"arn:aws:([a-z0-9-]+):(us-east-1)?:(123456789012)?:", r"\1:", text)
    text = re.sub(r"-\d{26}\b", "-<unique suffix>", text)  # name_prefix's: it follows the resource's content
    return text.replace(".us-east-1.amazonaws.com", "")


@pytest.fixture(scope="module")
def spec() -> iam.Spec:
    return iam.Spec(**stack.default_picture()["iam"])


def _documents(spec: iam.Spec):
    for role, found in spec.roles.items():
        for document in [*found["policies"].values(), *found["attached"]]:
            yield role, document


def test_the_transformation_drops_exactly_these_conditions_and_resources(spec):
    dropped = set()
    for role, document in _documents(spec):
        for sid, kind, what in iam.removed_by_moto(document):
            short = _short(json.dumps(what, sort_keys=True)) if kind == "Condition" else tuple(map(_short, what))
            dropped.add((role, sid, short))
    assert dropped == DROPPED


def test_every_s3_grant_reaches_moto_with_its_own_arns_and_nothing_else_changes(spec):
    for role, document in _documents(spec):
        moto = iam.for_moto(document)["Statement"]
        assert not [s for s in moto if "Condition" in s], role
        for statement in document["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            same = [s for s in moto if s.get("Sid") == statement.get("Sid") and s["Effect"] == statement["Effect"]]
            renamed = [f"monitoring:{a.split(':')[1]}" for a in actions if a.startswith("cloudwatch:")]  # moto's name
            assert sorted(a for s in same for a in s["Action"]) == sorted(actions + renamed), (
                role,
                statement.get("Sid"),
            )
            for s in same:
                if all(a.startswith("s3:") for a in s["Action"]):
                    assert s["Resource"] == statement["Resource"], (role, statement.get("Sid"))  # never widened
                else:
                    assert not any(a.startswith("s3:") for a in s["Action"]), (role, statement.get("Sid"))


def test_a_statement_of_s3_and_other_actions_is_split_and_a_deny_only_grows():
    bucket = "arn:aws:s3:::b/runs/*"
    document = {
        "Statement": [
            {"Sid": "Both", "Effect": "Allow", "Action": ["s3:GetObject", "kms:Decrypt"], "Resource": [bucket, "k"]},
            {"Sid": "No", "Effect": "Deny", "Action": "ecs:RunTask", "Resource": "t", "Condition": {"Bool": {}}},
        ]
    }
    assert iam.for_moto(document)["Statement"] == [
        {"Sid": "Both", "Effect": "Allow", "Action": ["s3:GetObject"], "Resource": [bucket, "k"]},
        {"Sid": "BothNotS3", "Effect": "Allow", "Action": ["kms:Decrypt"], "Resource": "*"},
        {"Sid": "No", "Effect": "Deny", "Action": ["ecs:RunTask"], "Resource": "*"},
    ]


def test_each_task_definitions_role_is_named_and_the_jobs_role_is_the_workers(spec):
    assert spec.role_of["control"] == "rayfleet-control-task"
    assert spec.role_of["task"] == spec.role_of["worker"] == spec.role_of["trainer"] == "rayfleet-task"
    assert spec.operator == "rayfleet-deployer"  # the rendered deployer (aws_iam_session_context)
