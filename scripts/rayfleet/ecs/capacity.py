"""Why capacity is not coming: the Auto Scaling groups' failed launches and the services' placement events.

An Auto Scaling group that cannot launch (no vCPU quota, no capacity in the zone, a Spot type unavailable)
is silent unless someone reads its scaling activities. `reasons` reads them for the groups behind the
services' capacity providers (describe_services -> capacityProviderStrategy -> describe_capacity_providers
-> autoScalingGroupArn), and the services' recent events ("unable to place a task"), and turns each into
one short line, flagged fatal (waiting cannot fix it: a quota, an invalid type, a denied permission) or not
(capacity may come back). `make start` (rayfleet/ecs/start.py) stops on a fatal one; `make status` lists them.

moto 5.2.5 answers DescribeScalingActivities with no activities whatever happened (and the moto stack has
no Auto Scaling group), so reading them goes through `scaling_activities`, which the tests replace with
activities recorded from AWS.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from botocore.exceptions import BotoCoreError, ClientError

from rayfleet.core.aws import Aws, translate
from rayfleet.ecs.outputs import Outputs

QUOTAS_URL = "https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas"


@dataclass(frozen=True)
class Quota:
    code: str
    name: str
    family: str  # as the reasons name it: "G and VT", "P", "Standard"

    @property
    def link(self) -> str:
        return f"{QUOTAS_URL}/{self.code}"


# EC2's vCPU quotas by instance family (Service Quotas, service code ec2): (family, spot) -> quota.
_STANDARD = "Standard (A, C, D, H, I, M, R, T, Z)"
VCPU_QUOTAS = {
    ("G", False): Quota("L-DB2E81BA", "Running On-Demand G and VT instances", "G and VT"),
    ("P", False): Quota("L-417A185B", "Running On-Demand P instances", "P"),
    ("standard", False): Quota("L-1216C47A", f"Running On-Demand {_STANDARD} instances", "Standard"),
    ("G", True): Quota("L-3819A6DF", "All G and VT Spot Instance Requests", "G and VT Spot"),
    ("P", True): Quota("L-7212CCBC", "All P Spot Instance Requests", "P Spot"),
    ("standard", True): Quota("L-34B43A08", f"All {_STANDARD} Spot Instance Requests", "Standard Spot"),
}


def vcpu_quota(instance_type: str, spot: bool) -> Quota | None:
    """The vCPU quota an instance type counts against (None: a family with a quota of its own, e.g. Inf, Trn, X)."""
    prefix = re.match(r"[a-z]*", instance_type).group()
    if prefix.startswith(("g", "vt")):
        family = "G"
    elif prefix == "p":
        family = "P"
    elif prefix in {"a", "c", "d", "h", "i", "m", "r", "t", "z", "im", "is"}:
        family = "standard"
    else:
        return None
    return VCPU_QUOTAS[(family, spot)]


@dataclass(frozen=True)
class Reason:
    text: str
    fatal: bool  # waiting cannot fix it: start stops at once
    group: str | None = None  # the worker group whose capacity it is about (None: the head's, or unknown)

    def __str__(self) -> str:
        return self.text


# (pattern in an activity's StatusMessage, fatal, what to say); the first match wins. {type} and {zone} come
# from the message where AWS names them, {code} is what matched; None: the quota line (_quota_text).
_NO_CAPACITY = r"sufficient (?P<type>[\w.]+) capacity in the Availability Zone you requested \((?P<zone>[\w-]+)\)"
_UNSUPPORTED = (
    r"instance type \((?P<type>[\w.]+)\) is not supported in your requested Availability Zone \((?P<zone>[\w-]+)\)"
)
_ACTIVITY_PATTERNS = [
    (r"VcpuLimitExceeded|vCPU limit", True, None),
    (r"InstanceLimitExceeded|MaxSpotInstanceCountExceeded", True, "instance count limit reached ({code})"),
    (r"PendingVerification|being verified", True, "the account is still being verified (PendingVerification)"),
    (_UNSUPPORTED, True, "{type} is not offered in {zone} (Unsupported): pin other availability_zones"),
    (r"InvalidParameter\w*|InvalidInstanceType|Unsupported", True, "the launch is invalid ({code})"),
    (r"UnauthorizedOperation|AccessDenied|not authorized", True, "not allowed to launch ({code})"),
    (_NO_CAPACITY, False, "InsufficientInstanceCapacity for {type} in {zone}"),
    (r"no Spot capacity|capacity-not-available", False, "Spot capacity not available for {type}"),
    (r"InsufficientInstanceCapacity", False, "InsufficientInstanceCapacity for {type}"),
    (r"SpotMaxPriceTooLow", False, "Spot price above the maximum price (SpotMaxPriceTooLow)"),
]


def activity_reason(activity: dict, group: str, instance_type: str = "", spot: bool = False) -> Reason | None:
    """One scaling activity (describe_scaling_activities) as a reason; None when it is no failure. The group's
    instance type and market stand in where the message does not name them."""
    message = " ".join(str(activity.get("StatusMessage") or "").split())
    named = re.search(r"instance type \(?([a-z0-9-]+\.[a-z0-9]+)", message)
    instance_type = named.group(1) if named else instance_type
    for pattern, fatal, said in _ACTIVITY_PATTERNS:
        found = re.search(pattern, message)
        if not found:
            continue
        if said is None:
            limit = re.search(r"vCPU limit of (\d+)", message)
            text = _quota_text(limit.group(1) if limit else "?", instance_type, spot or "Spot" in message)
        else:
            parts = {"type": instance_type or "the instance type", "code": found.group(0), **found.groupdict()}
            text = said.format(**parts)
        return Reason(f"{group} group: {text}", fatal)
    if activity.get("StatusCode") in ("Failed", "Cancelled") and message:
        return Reason(f"{group} group: {message.split('. ')[0][:160]}", False)
    return None


def _quota_text(limit: str, instance_type: str, spot: bool) -> str:
    quota = vcpu_quota(instance_type, spot) if instance_type else None
    if quota is None:
        return f"vCPU quota {limit} reached (VcpuLimitExceeded): request an increase at {QUOTAS_URL}"
    return f"vCPU quota {limit} for {quota.family} instances (VcpuLimitExceeded): request an increase at {quota.link}"


def event_reason(event: dict, service: str) -> Reason | None:
    """A service event (describe_services' events) that says a task has nowhere to go."""
    message = " ".join(str(event.get("message") or "").split())
    if "unable to place a task" not in message:
        return None
    why = re.search(r"Reason: ([^.]+)", message) or re.search(r"The closest matching .*? has ([^.]+)", message)
    detail = f" ({why.group(1)})" if why else ""
    return Reason(f"{service} service: no container instance can take its task yet{detail}", False)


def scaling_activities(autoscaling, group: str, since: datetime) -> list[dict]:
    """The group's activities that started since `since`, newest first. moto returns none (see the module)."""
    activities = []
    for page in autoscaling.get_paginator("describe_scaling_activities").paginate(AutoScalingGroupName=group):
        for activity in page["Activities"]:
            if activity["StartTime"] < since:
                return activities
            activities.append(activity)
    return activities


def _roles(out: Outputs) -> dict[str, tuple[str, str | None]]:
    """Service name -> (how messages name its nodes: "head", "worker" or "<group> worker", its worker group's name)."""
    roles: dict[str, tuple[str, str | None]] = {out.head_service_name: ("head", None)}
    if out.control_service_name:
        roles[out.control_service_name] = ("head", None)
    for name, group in out.worker_groups.items():
        roles[group.service_name] = (f"{name} worker" if len(out.worker_groups) > 1 else "worker", name)
    return roles


def groups(ecs, out: Outputs, services: list[dict]) -> dict[str, tuple[str, str | None]]:
    """Auto Scaling group name -> its role (_roles), from the services' capacity providers (a service without
    a strategy of its own uses the cluster's default one, as ECS does)."""
    roles = _roles(out)
    default = []
    if any(not s.get("capacityProviderStrategy") for s in services):
        cluster = ecs.describe_clusters(clusters=[out.cluster_name])["clusters"]
        default = cluster[0].get("defaultCapacityProviderStrategy", []) if cluster else []
    providers: dict[str, tuple[str, str | None]] = {}
    for service in services:
        for item in service.get("capacityProviderStrategy") or default:
            providers.setdefault(item["capacityProvider"], roles.get(service["serviceName"], ("head", None)))
    if not providers:
        return {}
    found = ecs.describe_capacity_providers(capacityProviders=list(providers))["capacityProviders"]
    return {
        p["autoScalingGroupProvider"]["autoScalingGroupArn"].rsplit("autoScalingGroupName/", 1)[-1]: providers[
            p["name"]
        ]
        for p in found
        if "autoScalingGroupProvider" in p
    }


Activities = Callable[[object, str, datetime], list[dict]]


def reasons(aws: Aws, out: Outputs, since: datetime, activities: Activities = scaling_activities) -> list[Reason]:
    """Why capacity is not coming since `since` (aware datetime): each reason once, fatal ones first. A policy
    that cannot read them gets a reason saying so: the diagnosis never stops a start or `make status`."""
    try:
        return _reasons(aws, out, since, activities)
    except (ClientError, BotoCoreError) as exc:
        return [Reason(f"cannot read why capacity is not coming ({translate(exc)})", False)]


def _reasons(aws: Aws, out: Outputs, since: datetime, activities: Activities) -> list[Reason]:
    ecs = aws.client("ecs")
    roles = _roles(out)
    services = ecs.describe_services(cluster=out.cluster_name, services=list(roles))["services"]
    found: list[Reason] = []
    for asg, (role, name) in groups(ecs, out, services).items():
        group = out.worker_groups[name] if name else None
        worker_type = group.instance_type if group else ""
        spot = group is not None and group.lifecycle == "spot"
        try:
            listed = activities(aws.client("autoscaling"), asg, since)
        except ClientError as exc:  # a policy without autoscaling:Describe*: say so, do not stop the wait
            found.append(Reason(f"{role} group: cannot read its scaling activities ({_code(exc)})", False))
            continue
        for activity in listed:  # newest first; a launch that succeeded ends the failures before it (a fallback
            if launched(activity):  # step must not fire while its nodes join Ray); a termination ends none
                break
            if reason := activity_reason(activity, role, worker_type, spot):
                found.append(replace(reason, group=name))
    for service in services:
        role, name = roles.get(service["serviceName"], ("head", None))
        for event in service.get("events") or []:  # newest first; a steady state ends what came before it
            if event["createdAt"] < since or "has reached a steady state" in event.get("message", ""):
                break
            if reason := event_reason(event, role):
                found.append(replace(reason, group=name))
    unique = list(dict.fromkeys(found))
    return [r for r in unique if r.fatal] + [r for r in unique if not r.fatal]


def launched(activity: dict) -> bool:
    """A scaling activity that launched an instance (its Description says "Launching a new EC2 instance: i-...")."""
    return activity.get("StatusCode") == "Successful" and str(activity.get("Description", "")).startswith("Launching")


def _code(exc: ClientError) -> str:
    return exc.response.get("Error", {}).get("Code", "error")
