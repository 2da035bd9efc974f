"""`rayfleet deploy check`'s pieces: the vCPUs a shape needs per quota, the caller ARN the simulator takes, and the
seams that read Service Quotas and the IAM simulator, against AWS's recorded answers (botocore's Stubber: moto
implements neither for EC2). The checks against moto's EC2 and STS: tests/integration/test_capacity_on_moto.py."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import NoCredentialsError
from botocore.stub import Stubber

from rayfleet.ecs.capacity import VCPU_QUOTAS, vcpu_quota
from rayfleet.ecs.preflight import GroupShape, Problem, Report, Shape, check, principal_arn, vcpu_needs
from rayfleet.ecs.preflight_calls import read_quota, simulate

G, P, STANDARD = VCPU_QUOTAS[("G", False)], VCPU_QUOTAS[("P", False)], VCPU_QUOTAS[("standard", False)]
G_SPOT = VCPU_QUOTAS[("G", True)]


def client(service: str):
    return boto3.client(service, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def test_instance_types_count_against_their_familys_quota():
    assert vcpu_quota("g5.12xlarge", False).code == "L-DB2E81BA"
    assert vcpu_quota("vt1.3xlarge", False) == G and vcpu_quota("g6e.xlarge", True).code == "L-3819A6DF"
    assert (
        vcpu_quota("p4d.24xlarge", False).code == "L-417A185B" and vcpu_quota("p5.48xlarge", True).code == "L-7212CCBC"
    )
    assert vcpu_quota("m5.xlarge", False).code == "L-1216C47A" and vcpu_quota("c5.xlarge", True).code == "L-34B43A08"
    assert vcpu_quota("inf2.xlarge", False) is None and vcpu_quota("trn1.2xlarge", False) is None


def shape(head: str, types: tuple, count: int, **group) -> Shape:
    return Shape("us-east-1", head, (GroupShape("ddp", types, count, **group),))


def test_the_workers_at_full_size_and_the_head_add_up_per_quota():
    needs, notes = vcpu_needs(shape("m5.xlarge", ("g5.12xlarge",), 2))
    assert needs == {
        STANDARD: (4, "the head 1 x m5.xlarge (4 vCPUs)"),
        G: (96, "ddp workers 2 x g5.12xlarge (48 vCPUs)"),
    }
    assert notes == []
    needs, _ = vcpu_needs(shape("g5.xlarge", ("g5.2xlarge",), 3))
    assert needs == {G: (4 + 24, "the head 1 x g5.xlarge (4 vCPUs) + ddp workers 3 x g5.2xlarge (8 vCPUs)")}


def test_every_group_adds_to_its_quota():
    two = Shape(
        "us-east-1", "m5.xlarge", (GroupShape("ddp", ("g5.xlarge",), 2), GroupShape("fsdp", ("g5.12xlarge",), 2))
    )
    needs, _ = vcpu_needs(two)
    assert needs[G] == (8 + 96, "ddp workers 2 x g5.xlarge (4 vCPUs) + fsdp workers 2 x g5.12xlarge (48 vCPUs)")


def test_spot_workers_count_the_largest_alternative_and_the_on_demand_base_apart():
    needs, _ = vcpu_needs(shape("m5.xlarge", ("g5.xlarge", "g6.xlarge", "g5.2xlarge"), 4, spot=True, on_demand_base=1))
    assert needs[G] == (4, "ddp workers on demand 1 x g5.xlarge (4 vCPUs)")
    assert needs[G_SPOT] == (24, "ddp workers Spot 3 x g5.2xlarge (8 vCPUs)")


def test_a_type_outside_the_catalog_is_noted_not_counted():
    needs, notes = vcpu_needs(shape("m5.xlarge", ("x9.huge",), 2))
    assert set(needs) == {STANDARD}
    assert notes == ["x9.huge: not in rayfleet/core/instance_types.json or no vCPU quota known; not checked"]


@pytest.mark.parametrize(
    ("caller", "principal"),
    [
        ("arn:aws:iam::123456789012:user/ops/alice", "arn:aws:iam::123456789012:user/ops/alice"),
        ("arn:aws:sts::123456789012:assumed-role/Deployer/alice-session", "arn:aws:iam::123456789012:role/Deployer"),
        ("arn:aws-cn:sts::123456789012:assumed-role/Deployer/s", "arn:aws-cn:iam::123456789012:role/Deployer"),
        ("arn:aws:iam::123456789012:root", None),
        ("arn:aws:sts::123456789012:federated-user/bob", None),
    ],
)
def test_the_simulator_takes_a_user_as_it_is_and_an_assumed_role_as_its_role(caller, principal):
    assert principal_arn(caller) == principal


def test_a_quota_is_the_accounts_applied_value_else_the_default():
    quotas = client("service-quotas")
    with Stubber(quotas) as stub:  # AWS's answers for an account that never asked for G vCPUs
        stub.add_client_error("get_service_quota", "NoSuchResourceException", http_status_code=400)
        stub.add_response("get_aws_default_service_quota", {"Quota": {"QuotaCode": G.code, "Value": 0.0}})
        assert read_quota(quotas, G.code) == 0.0
        stub.add_response("get_service_quota", {"Quota": {"QuotaCode": G.code, "Value": 64.0}})
        assert read_quota(quotas, G.code) == 64.0
        stub.add_client_error("get_service_quota", "NoSuchResourceException", http_status_code=400)
        stub.add_client_error("get_aws_default_service_quota", "NoSuchResourceException", http_status_code=400)
        assert read_quota(quotas, G.code) is None


def test_the_simulator_answers_a_decision_per_action():
    iam = client("iam")
    recorded = {
        "EvaluationResults": [
            {"EvalActionName": "iam:CreateRole", "EvalResourceName": "*", "EvalDecision": "implicitDeny"},
            {"EvalActionName": "ecs:CreateCluster", "EvalResourceName": "*", "EvalDecision": "allowed"},
        ],
        "IsTruncated": False,
    }
    with Stubber(iam) as stub:
        stub.add_response("simulate_principal_policy", recorded)
        decisions = simulate(iam, "arn:aws:iam::123456789012:user/a", ("iam:CreateRole", "ecs:CreateCluster"))
    assert decisions == {"iam:CreateRole": "implicitDeny", "ecs:CreateCluster": "allowed"}


class NoCredentials:
    region = "us-east-1"

    def client(self, service: str):
        sts = client("sts")
        sts.get_caller_identity = lambda: (_ for _ in ()).throw(NoCredentialsError())
        return sts


def test_without_credentials_the_one_problem_says_how_to_get_them():
    report = check(NoCredentials(), shape("m5.xlarge", ("g5.xlarge",), 2))
    assert report.identity is None and len(report.problems) == 1
    assert "no usable AWS credentials" in report.problems[0].what and "aws sso login" in report.problems[0].fix
    assert report.lines()[-1] == "1 problem(s) to fix first"


def test_a_report_prints_the_identity_each_problem_and_the_verdict():
    report = Report({"Account": "1", "Arn": "arn:aws:iam::1:user/a", "UserId": "u"}, [Problem("what", "fix")], ["n"])
    assert report.lines() == [
        "AWS account 1 as arn:aws:iam::1:user/a",
        "  problem: what: fix",
        "  note: n",
        "1 problem(s) to fix first",
    ]
    assert Report(report.identity).lines()[-1] == "ready to deploy"
