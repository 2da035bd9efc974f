"""Before `make deploy`: can this account launch what the deployment asks for? The checks behind `make check`.

A new account often has no G or P vCPU quota, and a GPU type is not offered in every zone: the deploy then
succeeds and the Auto Scaling groups fail to launch, silently. `check` asks AWS first:

  credentials   sts:GetCallerIdentity (the identity, for printing)
  permissions   ec2:RunInstances as a dry run for the worker type; iam:SimulatePrincipalPolicy for a short list
                of actions the deploy needs, when the caller is a user or role it can simulate
  quotas        the EC2 vCPU quotas of the Shape's instance families against the workers at full size + the head
  offerings     each instance type offered in the chosen zones

Each problem is one line with what to do (Problem). What moto 5.2.5 lacks has a seam in
rayfleet/ecs/preflight_calls.py (a small function taking the client; the tests pass one answering AWS's
recorded response). moto answers GetCallerIdentity, DescribeAvailabilityZones, DescribeInstanceTypeOfferings
and the dry run.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError
from botocore.parsers import ResponseParserError

from rayfleet.core.aws import Aws, translate
from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.ecs.capacity import Quota, vcpu_quota
from rayfleet.ecs.preflight_calls import dry_run_launch, read_quota, simulate

# What `make deploy` creates, one action per kind of resource (not the whole policy: a denied one shows the
# caller lacks the deploy's rights before Terraform stops half-way).
DEPLOY_ACTIONS = (
    "iam:CreateRole",
    "iam:PassRole",
    "kms:CreateKey",
    "ec2:CreateVpc",
    "ec2:CreateLaunchTemplate",
    "ecs:CreateCluster",
    "ecr:CreateRepository",
    "autoscaling:CreateAutoScalingGroup",
    "s3:CreateBucket",
    "secretsmanager:CreateSecret",
    "logs:CreateLogGroup",
)
# Any x86 AMI does for a dry run (it checks the permission); the deploy's own head AMI is at hand in every region.
DRY_RUN_AMI_PARAMETER = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"


@dataclass(frozen=True)
class GroupShape:
    """One worker group at full size: its instance types (the first preferred), its most nodes, Spot."""

    name: str
    instance_types: tuple[str, ...]
    count: int  # the group's maximum (or the nodes a start asks for)
    spot: bool = False
    on_demand_base: int = 0  # with Spot, this many nodes on demand


@dataclass(frozen=True)
class Shape:
    """What the deployment will launch (Terraform's variables): the head and each worker group at full size."""

    region: str
    head_instance_type: str
    groups: tuple[GroupShape, ...]
    zones: tuple[str, ...] = ()  # empty: the region's first az_count zones, as infra/modules/network does
    az_count: int = 1


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.fix}"


@dataclass
class Report:
    identity: dict | None  # sts:GetCallerIdentity's Account, Arn and UserId; None without credentials
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was not checked, and why

    def lines(self) -> list[str]:
        who = f"AWS account {self.identity['Account']} as {self.identity['Arn']}" if self.identity else "no identity"
        said = [who, *(f"  problem: {p}" for p in self.problems), *(f"  note: {n}" for n in self.notes)]
        return [*said, "ready to deploy" if not self.problems else f"{len(self.problems)} problem(s) to fix first"]


def check(
    aws: Aws,
    shape: Shape,
    *,
    quota: Callable[[object, str], float | None] = read_quota,
    simulate_policy: Callable[[object, str, tuple[str, ...]], dict[str, str]] = simulate,
    dry_run: Callable[[object, str, str, bool], str] = dry_run_launch,
) -> Report:
    """Every check. The keywords are the seams where moto lacks the API (see the module)."""
    try:
        identity = aws.client("sts").get_caller_identity()
    except (NoCredentialsError, ClientError, BotoCoreError) as exc:
        fix = "configure them (aws configure, aws sso login or AWS_PROFILE) and run `rayfleet deploy check` again"
        return Report(None, [Problem(f"no usable AWS credentials ({translate(exc)})", fix)])
    report = Report({k: identity[k] for k in ("Account", "Arn", "UserId")})
    ec2 = aws.client("ec2")
    _dry_run(aws, shape, report, dry_run)
    _permissions(aws, report, simulate_policy)
    # a worker group the account cannot hold does not stop the deploy of the rest: its runs wait (said)
    _quotas(aws, shape, report, quota, groups_block=False)
    _offerings(ec2, shape, report)
    return report


def check_capacity(aws: Aws, shape: Shape, *, quota: Callable[[object, str], float | None] = read_quota) -> Report:
    """The quotas and the offerings alone: what `make start` (and a run on a stopped deployment) checks before
    it scales a group up, so a launch that cannot happen is said at once, not after a wait."""
    report = Report(None)
    _quotas(aws, shape, report, quota, groups_block=True)
    _offerings(aws.client("ec2"), shape, report)
    return report


def deployment_shape(aws: Aws, out, starts: dict[str, int]) -> Shape | None:
    """What starting `starts` (group -> its nodes) of a deployment launches, beside its head (from its outputs
    and its subnets' zones); None when no group started has an instance type."""
    groups = tuple(
        GroupShape(name, g.types, count, g.lifecycle == "spot", g.on_demand_base)
        for name, count in starts.items()
        if (g := out.worker_groups[name]).types and count > 0
    )
    if not groups:
        return None
    subnets = aws.client("ec2").describe_subnets(SubnetIds=list(out.private_subnet_ids))["Subnets"]
    zones = tuple(sorted({s["AvailabilityZone"] for s in subnets}))
    return Shape(out.region, out.head_instance_type, groups, zones, len(zones) or 1)


def principal_arn(caller_arn: str) -> str | None:
    """The IAM ARN the simulator takes for the caller: a user as it is, an assumed role's session as its role
    (the path is not in the session ARN; _permissions looks it up); None for root and federated users."""
    found = re.fullmatch(r"arn:([\w-]+):(iam|sts)::(\d+):(.+)", caller_arn)
    if not found:
        return None
    partition, _, account, resource = found.groups()
    if resource.startswith("user/"):  # AWS names a user's ARN under iam (moto under sts): the simulator's is iam
        return f"arn:{partition}:iam::{account}:{resource}"
    if resource.startswith("assumed-role/"):
        return f"arn:{partition}:iam::{account}:role/{resource.split('/')[1]}"
    return None


def _permissions(aws: Aws, report: Report, simulate_policy) -> None:
    principal = principal_arn(report.identity["Arn"])
    if principal is None:
        report.notes.append(f"permissions not simulated for {report.identity['Arn']} (root or federated)")
        return
    iam = aws.client("iam", attempts=2)
    if ":role/" in principal:  # roles often live under a path (SSO's /aws-reserved/...): ask IAM for the ARN
        with contextlib.suppress(ClientError):  # without iam:GetRole the pathless ARN may still do
            principal = iam.get_role(RoleName=principal.rsplit("/", 1)[1])["Role"]["Arn"]
    try:
        decisions = simulate_policy(iam, principal, DEPLOY_ACTIONS)
    except (ClientError, BotoCoreError, ResponseParserError) as exc:  # not allowed, or an endpoint without it
        report.notes.append(f"permissions not simulated ({translate(exc)})")
        return
    denied = [a for a in DEPLOY_ACTIONS if decisions.get(a, "allowed") != "allowed"]
    if denied:
        report.problems.append(
            Problem(
                f"{principal} may not {', '.join(denied)}, which the deploy needs",
                "attach a policy that allows them (or deploy as an administrator) and run `rayfleet deploy check` "
                "again",
            )
        )


def _dry_run(aws: Aws, shape: Shape, report: Report, dry_run) -> None:
    if not shape.groups:
        return
    worker, spot = shape.groups[0].instance_types[0], shape.groups[0].spot
    try:
        image = aws.client("ssm").get_parameter(Name=DRY_RUN_AMI_PARAMETER)["Parameter"]["Value"]
    except ClientError as exc:
        report.notes.append(f"no dry-run launch of {worker}: cannot read the ECS AMI parameter ({translate(exc)})")
        return
    code = dry_run(aws.client("ec2"), image, worker, spot)
    if code == "UnauthorizedOperation":
        fix = (
            "allow ec2:RunInstances (and ec2:CreateTags) for the deploying identity, then `rayfleet deploy check` again"
        )
        report.problems.append(Problem(f"ec2:RunInstances of {worker} denied (UnauthorizedOperation)", fix))
    elif code != "DryRunOperation":  # e.g. no default VPC to try in: not the deploy's problem
        report.notes.append(f"the dry-run launch of {worker} answered {code}; not a verdict on the deploy")


Needs = dict[Quota, tuple[int, str]]  # quota -> (vCPUs, how that adds up)


def vcpu_needs(shape: Shape) -> tuple[Needs, list[str]]:
    """quota -> (vCPUs the deployment needs at full size, how that adds up); and the types not counted."""
    head, groups, notes = group_needs(shape)
    return _added(head, *groups.values()), notes


def group_needs(shape: Shape) -> tuple[Needs, dict[str, Needs], list[str]]:
    """The head's needs, each worker group's at full size, and the types not counted. Each quota counts the
    largest of the types that may land in it: a Spot group may launch any of them."""
    notes: list[str] = []
    head = _needs([(1, (shape.head_instance_type,), False, "the head")] if shape.head_instance_type else [], notes)
    groups = {}
    for g in shape.groups:
        main, base, who = g.instance_types[0], min(g.on_demand_base, g.count), f"{g.name} workers"
        if g.spot:
            parts = [
                (base, (main,), False, f"{who} on demand"),
                (g.count - base, g.instance_types, True, f"{who} Spot"),
            ]
        else:
            parts = [(g.count, (main,), False, who)]
        groups[g.name] = _needs(parts, notes)
    return head, groups, list(dict.fromkeys(notes))


def _needs(parts, notes: list[str]) -> Needs:
    needs: Needs = {}
    for count, types, spot, who in (p for p in parts if p[0] > 0):
        largest: dict[Quota, str] = {}
        for t in types:
            quota = vcpu_quota(t, spot)
            if t not in INSTANCE_TYPES or quota is None:
                notes.append(f"{t}: not in rayfleet/core/instance_types.json or no vCPU quota known; not checked")
            elif quota not in largest or INSTANCE_TYPES[t]["vcpus"] > INSTANCE_TYPES[largest[quota]]["vcpus"]:
                largest[quota] = t
        for quota, t in largest.items():
            line = f"{who} {count} x {t} ({INSTANCE_TYPES[t]['vcpus']} vCPUs)"
            needs = _added(needs, {quota: (count * INSTANCE_TYPES[t]["vcpus"], line)})
    return needs


def _added(*all_needs: Needs) -> Needs:
    total: Needs = {}
    for needs in all_needs:
        for quota, (vcpus, how) in needs.items():
            had, said = total.get(quota, (0, ""))
            total[quota] = (had + vcpus, f"{said} + {how}" if said else how)
    return total


def _quotas(aws: Aws, shape: Shape, report: Report, quota, groups_block: bool) -> None:
    """The head's shortfall is a problem; a worker group's (with the head) is one only where `groups_block`,
    else a note that runs needing the group will wait."""
    head, groups, notes = group_needs(shape)
    report.notes += notes
    quotas = aws.client("service-quotas", attempts=2)
    values: dict[Quota, float | None] = {}
    for q in _added(head, *groups.values()):
        try:
            values[q] = quota(quotas, q.code)
        except (ClientError, BotoCoreError, ResponseParserError) as exc:
            report.notes.append(f"quota {q.code} not read ({translate(exc)})")
        else:
            if values[q] is None:
                report.notes.append(f"quota {q.code} ({q.name}) unknown to Service Quotas in {shape.region}")
    short = [(None, head)] + [(name, _added(head, needs)) for name, needs in groups.items()]
    for group, needs in short:
        for q, (need, how) in needs.items():
            value = values.get(q)
            if value is None or value >= need or (group is not None and q in head and value < head[q][0]):
                continue
            what = f"EC2 quota {q.name} ({q.code}) is {value:g} vCPUs; "
            what += "at full size the deployment" if group is None else f"worker group {group} at full size"
            fix = f"request {need} (more if other instances of the family run) at {q.link}; approval can take a day"
            if group is None or groups_block:
                report.problems.append(Problem(f"{what} needs {need} ({how})", fix))
            else:
                report.notes.append(
                    f"{what} needs {need} ({how}): the deploy goes on, but runs needing {group} cannot start its"
                    f" nodes until the quota is raised; {fix}"
                )
    if not groups_block and len(groups) > 1:
        for q, (need, how) in _added(head, *groups.values()).items():
            value = values.get(q)
            if (
                value is not None
                and value < need
                and all(value >= _added(head, n).get(q, (0, ""))[0] for n in groups.values())
            ):
                report.notes.append(
                    f"EC2 quota {q.name} ({q.code}) is {value:g} vCPUs: every worker group fits alone, not all at"
                    f" full size at once ({need}: {how}); runs wait for each other"
                )


def offered_zones(ec2, instance_types: list[str]) -> dict[str, set[str]]:
    """instance type -> the zones of the client's region that offer it."""
    offered: dict[str, set[str]] = {t: set() for t in instance_types}
    pages = ec2.get_paginator("describe_instance_type_offerings").paginate(
        LocationType="availability-zone", Filters=[{"Name": "instance-type", "Values": instance_types}]
    )
    for page in pages:
        for o in page["InstanceTypeOfferings"]:
            offered.setdefault(o["InstanceType"], set()).add(o["Location"])
    return offered


def _offerings(ec2, shape: Shape, report: Report) -> None:
    worker_types = [t for g in shape.groups for t in g.instance_types]
    types = [t for t in dict.fromkeys((shape.head_instance_type, *worker_types)) if t]
    offered = offered_zones(ec2, types)
    if shape.zones:
        chosen, which = list(shape.zones), "the availability_zones set"
    else:  # as infra/modules/network picks them: available zones (not Local or Wavelength ones), by name
        zones = ec2.describe_availability_zones(
            Filters=[{"Name": "zone-type", "Values": ["availability-zone"]}, {"Name": "state", "Values": ["available"]}]
        )["AvailabilityZones"]
        chosen, which = sorted(z["ZoneName"] for z in zones)[: shape.az_count], f"the first {shape.az_count} zone(s)"
    common = sorted(set.intersection(*offered.values()))
    for t in types:
        missing = [z for z in chosen if z not in offered[t]]
        if not offered[t]:
            report.problems.append(
                Problem(f"{t} is not offered in {shape.region}", "choose another instance type or region")
            )
        elif missing:
            if len(common) >= len(chosen):
                fix = f"set availability_zones = {json.dumps(common[: len(chosen)])}"
            else:
                fix = f"only {', '.join(common) or 'no zone'} offer(s) every type: fewer zones, or other types"
            where = f"{', '.join(missing)} ({which})"
            report.problems.append(
                Problem(f"{t} is not offered in {where}; it is in {', '.join(sorted(offered[t]))}", fix)
            )
