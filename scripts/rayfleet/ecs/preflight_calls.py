"""The preflight's AWS calls that moto 5.2.5 cannot answer, each a small function taking the client, so that a
test passes one answering AWS's recorded response instead (rayfleet/ecs/preflight.py):
  * Service Quotas knows only VPC's quotas (EC2's answer NoSuchResourceException): `read_quota`;
  * iam:SimulatePrincipalPolicy is not implemented (an HTTP 500): `simulate`;
  * a dry run is never denied (moto enforces no IAM): `dry_run_launch`.
"""

from __future__ import annotations

from botocore.exceptions import ClientError


def read_quota(quotas, code: str) -> float | None:
    """An EC2 quota's value: the account's applied one, else AWS's default (None: Service Quotas knows neither)."""
    try:
        return quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
    except quotas.exceptions.NoSuchResourceException:
        pass
    try:
        return quotas.get_aws_default_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
    except quotas.exceptions.NoSuchResourceException:
        return None


def simulate(iam, principal: str, actions: tuple[str, ...]) -> dict[str, str]:
    """action -> EvalDecision ("allowed", "implicitDeny", "explicitDeny") for the principal's policies."""
    decisions = {}
    for page in iam.get_paginator("simulate_principal_policy").paginate(
        PolicySourceArn=principal, ActionNames=list(actions)
    ):
        decisions.update({r["EvalActionName"]: r["EvalDecision"] for r in page["EvaluationResults"]})
    return decisions


def dry_run_launch(ec2, image: str, instance_type: str, spot: bool) -> str:
    """ec2:RunInstances as a dry run: AWS's answer code ("DryRunOperation": it would have been allowed)."""
    market = {"InstanceMarketOptions": {"MarketType": "spot"}} if spot else {}
    try:
        ec2.run_instances(DryRun=True, ImageId=image, InstanceType=instance_type, MinCount=1, MaxCount=1, **market)
    except ClientError as exc:
        return exc.response.get("Error", {}).get("Code", "")
    return "DryRunOperation"  # AWS always answers a dry run with an error; an endpoint that did not, allowed it
