"""`rayfleet deploy check` and why capacity is not coming, against moto_server with the stack Terraform renders
(tools/moto_stack/stack.py), a stack of this module's own: the tests put back the services' capacity
provider strategies and scale the workers.

moto answers GetCallerIdentity, the SSM AMI parameter, DescribeAvailabilityZones, DescribeInstanceTypeOfferings
and RunInstances with DryRun, the services and capacity providers. What it lacks stands behind the adapters'
seams, answered here with AWS's recorded responses: EC2's vCPU quotas (its Service Quotas knows only VPC),
iam:SimulatePrincipalPolicy (unimplemented), a denied dry run (moto's DryRun never refuses), and the Auto Scaling
groups' scaling activities (DescribeScalingActivities always answers none; the stack has no group either).
"""

from __future__ import annotations

import functools
import json
import time
from datetime import UTC, datetime

import pytest

from rayfleet.core.aws import Aws, run_cli
from rayfleet.core.bucket import RAY_STATUS as KEY
from rayfleet.core.errors import EXIT_FAILED, RayfleetError
from rayfleet.ecs import capacity, preflight
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.start import start
from rayfleet.ops.status.gather import status
from rayfleet.ops.status.render import render
from tests.integration.helpers import EcsMotoServer, verbs_env
from tools.moto_stack import stack as moto_stack

pytestmark = pytest.mark.integration
QUOTA_LINK = "https://console.aws.amazon.com/servicequotas/home/services/ec2/quotas/L-DB2E81BA"
# StatusMessages of failed launches as AWS records them in an Auto Scaling group's activities.
NO_CAPACITY = (
    "We currently do not have sufficient g5.12xlarge capacity in the Availability Zone you requested (us-west-2a). "
    "Our system will be working on provisioning additional capacity. You can currently get g5.12xlarge capacity "
    "by not specifying an Availability Zone in your request or choosing us-west-2b, us-west-2c. "
    "Launching EC2 instance failed."
)
NO_VCPUS = (
    "You have requested more vCPU capacity than your current vCPU limit of 0 allows for the instance bucket that "
    "the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request "
    "an adjustment to this limit. Launching EC2 instance failed."
)
NO_SPOT = (
    "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that "
    "matches your request. Launching EC2 instance failed."
)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """The rendered deployment in a moto of the module's own, with the services' capacity provider strategies
    (moto's CreateService drops them; UpdateService keeps them), and the env pointing the adapter at it."""
    picture = moto_stack.default_picture()
    server = EcsMotoServer().start()
    try:
        made = moto_stack.create(server, tmp_path_factory.mktemp("capacity"), picture)
        ecs = server.client("ecs")
        for service in picture["services"]:
            ecs.update_service(
                cluster=made["cluster"],
                service=service["serviceName"],
                capacityProviderStrategy=service["capacityProviderStrategy"],
            )
        env = verbs_env(server.url, made["outputs_file"], moto_stack.REGION)
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                if key.startswith(("AWS_", "RAYFLEET_")):
                    patch.setenv(key, value)
            patch.delenv("AWS_PROFILE", raising=False)
            yield {"server": server, "picture": picture, "out": Outputs.load(), "ecs": ecs}
    finally:
        server.stop()


@pytest.fixture
def deployment(deployed):
    """The module's deployment, its services put back to their deployed counts afterwards."""
    out, ecs = deployed["out"], deployed["ecs"]
    names = [out.head_service_name, out.group(None).service_name, out.control_service_name]
    before = {
        s["serviceName"]: s["desiredCount"]
        for s in ecs.describe_services(cluster=out.cluster_name, services=names)["services"]
    }
    yield deployed
    for name, count in before.items():
        ecs.update_service(cluster=out.cluster_name, service=name, desiredCount=count)


def worker_group(deployed) -> str:
    return deployed["picture"]["nodeGroups"]["worker"]["autoScalingGroup"]


def recorded(by_group: dict[str, list[str]], status_code: str = "Failed"):
    """A stand-in for capacity.scaling_activities: the groups' activities, as AWS records a failed launch."""

    def activities(autoscaling, group: str, since: datetime) -> list[dict]:
        now = datetime.now(UTC)
        return [
            {"ActivityId": f"a{i}", "StartTime": now, "StatusCode": status_code, "StatusMessage": message}
            for i, message in enumerate(by_group.get(group, []))
            if now >= since
        ]

    return activities


def why(by_group: dict[str, list[str]]):
    return functools.partial(capacity.reasons, activities=recorded(by_group))


class Clock:
    """Starts 10 s in the past (a snapshot written now counts as taken after the start) and steps 20 s a read."""

    def __init__(self, step: float = 20) -> None:
        self.now, self.step, self.reads = time.time() - 10, step, 0

    def __call__(self) -> float:
        self.now += self.step
        self.reads += 1
        return self.now - self.step


# --- make check ------------------------------------------------------------------------------------------------

SHAPE = preflight.Shape("us-east-1", "m5.xlarge", (preflight.GroupShape("default", ("g5.xlarge",), 2),))


def quotas(**values: float):
    """Service Quotas' recorded answer: each quota's value (512 vCPUs where not given)."""
    return lambda client, code: values.get(code.replace("-", "_"), 512.0)


OPERATOR = (
    "arn:aws:iam::123456789012:user/rayfleet-deployer"  # `rayfleet deploy check` runs as the operator (IAM enforced)
)


def allowed(iam, principal, actions):
    assert principal == OPERATOR  # the caller, as STS names it
    return dict.fromkeys(actions, "allowed")


def test_check_passes_for_a_shape_the_account_can_launch(deployed):
    report = preflight.check(Aws("us-east-1"), SHAPE, quota=quotas(), simulate_policy=allowed)
    assert report.identity["Arn"] == OPERATOR
    assert report.problems == [] and report.notes == []  # the dry run ran on moto: no note says otherwise
    assert report.lines()[-1] == "ready to deploy"


def test_check_a_zero_g_quota_names_the_quota_the_number_and_the_link(deployed):
    """A worker group the quota cannot hold does not stop the deploy (its runs wait, said with the number to ask
    for); the head's quota does."""
    report = preflight.check(Aws("us-east-1"), SHAPE, quota=quotas(L_DB2E81BA=0.0), simulate_policy=allowed)
    assert report.problems == [] and report.notes == [
        "EC2 quota Running On-Demand G and VT instances (L-DB2E81BA) is 0 vCPUs; worker group default at full size"
        " needs 8 (default workers 2 x g5.xlarge (4 vCPUs)): the deploy goes on, but runs needing default cannot start"
        f" its nodes until the quota is raised; request 8 (more if other instances of the family run) at {QUOTA_LINK};"
        " approval can take a day"
    ]
    head = preflight.check(Aws("us-east-1"), SHAPE, quota=quotas(L_1216C47A=0.0), simulate_policy=allowed)
    assert [p.what for p in head.problems] == [
        "EC2 quota Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances (L-1216C47A) is 0 vCPUs; at full"
        " size the deployment needs 4 (the head 1 x m5.xlarge (4 vCPUs))"
    ]


def test_check_a_type_not_offered_in_the_zone_names_the_zones_that_offer_it(deployed):
    groups = (preflight.GroupShape("big", ("p4d.24xlarge",), 1),)
    shape = preflight.Shape("us-east-1", "m5.xlarge", groups, zones=("us-east-1f",))
    report = preflight.check(Aws("us-east-1"), shape, quota=quotas(), simulate_policy=allowed)
    assert [str(p) for p in report.problems] == [  # moto's offerings: p4d.24xlarge in a-d, not f
        "p4d.24xlarge is not offered in us-east-1f (the availability_zones set); it is in us-east-1a, us-east-1b, "
        'us-east-1c, us-east-1d: set availability_zones = ["us-east-1a"]'
    ]


def test_check_a_denied_dry_run_and_denied_deploy_actions_are_problems(deployed):
    def denied_launch(ec2, image, instance_type, spot):
        assert image.startswith("ami-") and instance_type == "g5.xlarge" and not spot
        return "UnauthorizedOperation"  # what AWS answers a dry run the caller may not do

    def denied(iam, principal, actions):
        return {**dict.fromkeys(actions, "allowed"), "iam:CreateRole": "implicitDeny", "kms:CreateKey": "explicitDeny"}

    report = preflight.check(Aws("us-east-1"), SHAPE, quota=quotas(), simulate_policy=denied, dry_run=denied_launch)
    assert [p.what for p in report.problems] == [
        "ec2:RunInstances of g5.xlarge denied (UnauthorizedOperation)",
        f"{OPERATOR} may not iam:CreateRole, kms:CreateKey, which the deploy needs",
    ]


# --- why capacity is not coming ---------------------------------------------------------------------------------


def test_reasons_read_the_worker_groups_activities_through_the_services_capacity_providers(deployed):
    out, since = deployed["out"], datetime.now(UTC)
    reasons = capacity.reasons(
        Aws(out.region), out, since, activities=recorded({worker_group(deployed): [NO_CAPACITY, NO_VCPUS]})
    )
    assert reasons == [
        capacity.Reason(
            "worker group: vCPU quota 0 for G and VT instances (VcpuLimitExceeded): request an increase at "
            + QUOTA_LINK,
            True,
            group="default",  # the worker group it is about: a wait or a fallback acts on its own groups only
        ),
        capacity.Reason("worker group: InsufficientInstanceCapacity for g5.12xlarge in us-west-2a", False, "default"),
    ]
    assert capacity.reasons(Aws(out.region), out, since, activities=recorded({"another-group": [NO_VCPUS]})) == []
    spot = capacity.reasons(Aws(out.region), out, since, activities=recorded({worker_group(deployed): [NO_SPOT]}))
    assert spot == [capacity.Reason("worker group: Spot capacity not available for g5.xlarge", False, "default")]
    # a launch that succeeded since (newest first) ends the failures before it: the capacity came
    ok = {"ActivityId": "ok", "StartTime": since, "StatusCode": "Successful", "StatusMessage": ""}
    launched = [{**ok, "Description": "Launching a new EC2 instance: i-0123456789abcdef0"}]
    later = recorded({worker_group(deployed): [NO_SPOT]})
    came = capacity.reasons(Aws(out.region), out, since, activities=lambda *a: launched + later(*a))
    assert came == []
    assert capacity.reasons(Aws(out.region), out, since, activities=lambda *a: later(*a) + launched) == spot
    # a termination (scale-in, a Spot interruption) that succeeded since says nothing of capacity coming
    ended = [{**ok, "Description": "Terminating EC2 instance: i-0123456789abcdef0"}]
    assert capacity.reasons(Aws(out.region), out, since, activities=lambda *a: ended + later(*a)) == spot


@pytest.mark.parametrize(
    ("message", "said", "fatal"),
    [
        (
            "Could not launch On-Demand Instances. Unsupported - Your requested instance type (g5.12xlarge) is not "
            "supported in your requested Availability Zone (us-east-1e). Please retry your request by not "
            "specifying an Availability Zone or choosing us-east-1a, us-east-1b. Launching EC2 instance failed.",
            "worker group: g5.12xlarge is not offered in us-east-1e (Unsupported): pin other availability_zones",
            True,
        ),
        (
            "You are not authorized to use launch template: lt-0912e1d5629fa0227",
            "worker group: not allowed to launch (not authorized)",
            True,
        ),
        (
            "Could not launch On-Demand Instances. InstanceLimitExceeded - You have requested more instances (3) "
            "than your current instance limit of 2 allows for the specified instance type.",
            "worker group: instance count limit reached (InstanceLimitExceeded)",
            True,
        ),
        (NO_SPOT, "worker group: Spot capacity not available for g5.xlarge", False),
    ],
)
def test_a_failed_launch_is_fatal_only_when_waiting_cannot_fix_it(message, said, fatal):
    activity = {"StatusCode": "Failed", "StatusMessage": message}
    assert capacity.activity_reason(activity, "worker", "g5.xlarge") == capacity.Reason(said, fatal)
    assert capacity.activity_reason({"StatusCode": "Successful", "StatusMessage": ""}, "worker") is None


def test_a_service_that_cannot_place_its_task_says_why():
    event = {
        "message": "(service rayfleet-ray-worker) was unable to place a task because no container instance met all "
        "of its requirements. Reason: No Container Instances were found in your cluster. For more information, "
        "see the Troubleshooting section."
    }
    assert capacity.event_reason(event, "worker") == capacity.Reason(
        "worker service: no container instance can take its task yet (No Container Instances were found in your "
        "cluster)",
        False,
    )
    assert capacity.event_reason({"message": "(service x) has reached a steady state."}, "worker") is None


def test_start_stops_at_once_on_a_reason_waiting_cannot_fix(deployment):
    out, said = deployment["out"], []
    deployment["ecs"].update_service(cluster=out.cluster_name, service=out.group(None).service_name, desiredCount=0)

    clocks = []

    def main(argv):
        clocks.append(Clock())
        return start(
            Aws(out.region),
            out,
            say=said.append,
            poll_s=0,
            clock=clocks[-1],
            why=why({worker_group(deployment): [NO_VCPUS]}),
        )

    assert run_cli(main) == EXIT_FAILED
    # At its first look, not at its timeout: the deadline is the clock's one read (a wait to the timeout would
    # read it 90 times at 20 s a read), and nothing was said past scaling the services.
    assert clocks[0].reads == 1 and all(line.startswith("scaling ") for line in said), (clocks[0].reads, said)
    with pytest.raises(
        RayfleetError, match=r"capacity cannot come: worker group: vCPU quota 0 for G and VT .*L-DB2E81BA"
    ):
        main([])


def test_start_says_a_transient_reason_in_its_progress_lines_and_at_the_timeout(deployment):
    out, said = deployment["out"], []
    deployment["ecs"].update_service(cluster=out.cluster_name, service=out.group(None).service_name, desiredCount=0)
    reason = "worker group: InsufficientInstanceCapacity for g5.12xlarge in us-west-2a"
    with pytest.raises(RayfleetError) as raised:
        start(
            Aws(out.region),
            out,
            say=said.append,
            timeout_s=100,
            poll_s=0,
            clock=Clock(),
            why=why({worker_group(deployment): [NO_CAPACITY]}),
        )
    progress = [line for line in said if line.startswith("[")]
    assert progress and all(line.endswith(f"; capacity: {reason}") for line in progress)
    assert "no snapshot from the new head yet" in progress[0]  # and moto says how many tasks run
    assert f"Ray sees 0/2 workers (last reasons: {reason})" in str(raised.value)


def test_status_shows_the_capacity_reasons_of_the_last_hour(deployed):
    out = deployed["out"]
    shown = status(Aws(out.region), out, runs=1, why=why({worker_group(deployed): [NO_CAPACITY]}))
    reason = "worker group: InsufficientInstanceCapacity for g5.12xlarge in us-west-2a"
    assert shown["capacity"] == [{"reason": reason, "fatal": False}]
    assert f"capacity (the last hour: why instances are not coming)\n  {reason}\n" in render(shown)
    quiet = status(Aws(out.region), out, runs=1)  # moto records no activities: no section
    assert quiet["capacity"] == [] and "capacity (" not in render(quiet)


def write_snapshot(deployed, workers: int) -> None:
    nodes = [{"node_id": "h", "alive": True, "head": True, "resources": {"CPU": 4.0}}]
    nodes += [{"node_id": f"w{i}", "alive": True, "head": False, "resources": {"GPU": 1.0}} for i in range(workers)]
    body = {"taken_at": datetime.now(UTC).isoformat(timespec="seconds"), "nodes": nodes, "jobs": [], "serve": []}
    deployed["server"].client("s3").put_object(
        Bucket=deployed["out"].results_bucket, Key=KEY, Body=json.dumps(body).encode()
    )


def desired_workers(deployed) -> int:
    out = deployed["out"]
    found = deployed["ecs"].describe_services(cluster=out.cluster_name, services=[out.group(None).service_name])
    return found["services"][0]["desiredCount"]


def test_start_with_fewer_workers_scales_up_to_them_and_never_down(deployment):
    out, said = deployment["out"], []
    assert out.group(None).max_nodes == 2 and desired_workers(deployment) == 2  # the deployed stack runs both
    write_snapshot(deployment, 2)
    result = start(Aws(out.region), out, say=said.append, poll_s=0, clock=Clock(), starts={"default": 1})
    assert desired_workers(deployment) == 2 and result["workers"] == 2
    assert f"{out.group(None).service_name} stays at 2 (asked for 1) ..." in said
    deployment["ecs"].update_service(cluster=out.cluster_name, service=out.group(None).service_name, desiredCount=0)
    write_snapshot(deployment, 1)
    said.clear()
    start(Aws(out.region), out, say=said.append, poll_s=0, clock=Clock(), starts={"default": 1})
    assert desired_workers(deployment) == 1 and f"scaling {out.group(None).service_name} to 1 ..." in said
    write_snapshot(deployment, 2)
    start(Aws(out.region), out, say=said.append, poll_s=0, clock=Clock(), starts={"default": 5})
    assert desired_workers(deployment) == 2  # capped at the group's maximum
    assert "5 workers asked for; worker group default launches at most 2: starting 2" in said


def test_start_checks_the_quota_for_what_it_launches_before_scaling_anything(deployment):
    """A G quota of 0 (Service Quotas' recorded answer): `rayfleet deploy start` says so with the number to ask for and
    scales nothing, instead of waiting on instances that cannot come."""
    out, ecs = deployment["out"], deployment["ecs"]
    names = [out.head_service_name, out.group(None).service_name]
    for name in names:
        ecs.update_service(cluster=out.cluster_name, service=name, desiredCount=0)
    with pytest.raises(RayfleetError) as refused:
        start(
            Aws(out.region), out, say=lambda _: None, poll_s=0, clock=Clock(), starts={"default": 1},
            quota=quotas(L_DB2E81BA=0),
        )  # fmt: skip
    message = str(refused.value)
    assert message.startswith(
        "cannot start 1 x g5.xlarge (default): EC2 quota Running On-Demand G and VT instances (L-DB2E81BA)"
    )
    assert "is 0 vCPUs" in message and "request 4" in message  # one g5.xlarge: 4 vCPUs
    services = ecs.describe_services(cluster=out.cluster_name, services=names)["services"]
    assert [s["desiredCount"] for s in services] == [0, 0]  # nothing scaled
    assert out.head_instance_type == "m5.xlarge"  # the head counted too, from the deployment's outputs
