"""A suspect worker's instance is taken out by the control task (`replace_suspects` of
rayfleet/node/control/head_snapshot.py, rayfleet/node/control/suspect.py) against a real moto_server: from the
snapshot's
dead node, only when ECS says the instance its drain message names is the one behind the node's own address
and runs a task of the worker service; its ECS container instance goes DRAINING and its Auto Scaling group
sees it Unhealthy, once, and nothing else is touched. A message naming the head's instance, another worker's,
or an instance at an address no worker task has is refused with one line (R3 of issue 54: any job can drain
any node with any message). What moto cannot show: the group actually terminating and replacing the
instance; IAM allowing exactly these calls to the control role only is the Terraform tests' and the IAM
fixture's."""

from __future__ import annotations

import pytest

from rayfleet.core.aws import Aws
from rayfleet.node.control import suspect
from rayfleet.node.control.head_snapshot import replace_suspects

pytestmark = pytest.mark.integration
WORKERS = "rf-ray-worker"


def container(cpu: int) -> list[dict]:
    return [{"name": "ray", "image": "ray:x", "cpu": cpu, "memory": 512, "essential": True}]


@pytest.fixture
def deployment(moto, monkeypatch) -> dict:
    """A cluster `rf` of two worker instances (group rf-worker-1, each running a worker-service task: awsvpc,
    as the default deployment) and a head instance (group rf-head-1, its task in host mode, as on EFA)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    for key, value in moto.as_identity("control").items():  # the control task's code, as its role (IAM enforced)
        monkeypatch.setenv(key, value)
    ec2, ecs, autoscaling = moto.client("ec2"), moto.client("ecs"), moto.client("autoscaling")
    template = ec2.create_launch_template(
        LaunchTemplateName="rf", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}
    )["LaunchTemplate"]
    groups = {}
    for group, size in (("rf-worker-1", 2), ("rf-head-1", 1)):
        autoscaling.create_auto_scaling_group(
            AutoScalingGroupName=group,
            LaunchTemplate={"LaunchTemplateId": template["LaunchTemplateId"]},
            MinSize=size,
            MaxSize=size,
            AvailabilityZones=["us-east-1a"],
        )
        found = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
        groups[group] = [i["InstanceId"] for i in found["Instances"]]
    ecs.create_cluster(clusterName="rf")
    arns = {}
    for instance in groups["rf-worker-1"] + groups["rf-head-1"]:  # workers first: run_task fills in this order
        document = f'{{"instanceId": "{instance}", "instanceType": "g5.xlarge", "region": "us-east-1"}}'
        registered = ecs.register_container_instance(cluster="rf", instanceIdentityDocument=document)
        arns[instance] = registered["containerInstance"]["containerInstanceArn"]
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    ecs.register_task_definition(family="rf-worker", networkMode="awsvpc", containerDefinitions=container(4096))
    ecs.register_task_definition(family="rf-head", networkMode="host", containerDefinitions=container(1024))
    network = {"awsvpcConfiguration": {"subnets": [subnet], "securityGroups": []}}
    tasks = ecs.run_task(
        cluster="rf", taskDefinition="rf-worker", count=2, group=f"service:{WORKERS}", networkConfiguration=network
    )["tasks"]
    ip_of = {}
    for task in tasks:
        instance = next(i for i, arn in arns.items() if arn == task["containerInstanceArn"])
        details = {d["name"]: d["value"] for d in task["attachments"][0]["details"]}
        ip_of[instance] = details["privateIPv4Address"]
    (head,) = groups["rf-head-1"]
    ecs.start_task(cluster="rf", taskDefinition="rf-head", containerInstances=[arns[head]], group="service:rf-ray-head")
    reservations = ec2.describe_instances(InstanceIds=[head])["Reservations"]
    ip_of[head] = reservations[0]["Instances"][0]["PrivateIpAddress"]
    assert sorted(ip_of) == sorted(groups["rf-worker-1"] + [head])  # one worker task on each worker instance
    return {"ecs": ecs, "autoscaling": autoscaling, "workers": groups["rf-worker-1"], "head": head, "ip": ip_of}


def states(deployment) -> tuple[dict, dict]:
    ecs, autoscaling = deployment["ecs"], deployment["autoscaling"]
    arns = ecs.list_container_instances(cluster="rf")["containerInstanceArns"]
    described = ecs.describe_container_instances(cluster="rf", containerInstances=arns)["containerInstances"]
    found = autoscaling.describe_auto_scaling_instances()["AutoScalingInstances"]
    return (
        {c["ec2InstanceId"]: c["status"] for c in described},
        {i["InstanceId"]: i["HealthStatus"].upper() for i in found},  # the API's spelling varies in case
    )


def dead(node_id: str, address: str, message: str) -> dict:
    return {"node_id": node_id, "alive": False, "head": False, "address": address, "message": message}


def test_the_suspect_worker_behind_the_dead_nodes_address_is_drained_and_marked_unhealthy(deployment):
    bad, good = deployment["workers"]
    taken = {"nodes": [
        dead("a1", deployment["ip"][bad], f"Terminated due to preemption: node suspect on {bad}: GPU 0 lost"),
        dead("b2", deployment["ip"][good], "Terminated due to preemption: the task was stopped (SIGTERM)"),
        {"node_id": "c3", "alive": True, "head": False, "address": deployment["ip"][good]},
    ]}  # fmt: skip
    handled: set[str] = set()
    done = replace_suspects(taken, "rf", Aws("us-east-1"), handled, [WORKERS])
    assert replace_suspects(taken, "rf", Aws("us-east-1"), handled, [WORKERS]) == []  # once per instance

    assert done == [
        f"ECS container instance of {bad} set DRAINING",
        f"{bad} marked Unhealthy: its Auto Scaling group replaces it",
    ]
    containers, health = states(deployment)
    assert containers == {bad: "DRAINING", good: "ACTIVE", deployment["head"]: "ACTIVE"}
    assert health == {bad: "UNHEALTHY", good: "HEALTHY", deployment["head"]: "HEALTHY"}


def test_a_message_naming_the_head_another_worker_or_no_worker_is_refused(deployment):
    """What a job can drain any node with: each refused with one line, nothing drained or marked. On the old
    code every one of these instances was taken out, the head's included."""
    (one, other), head, ip = deployment["workers"], deployment["head"], deployment["ip"]
    suspect_on = "Terminated due to preemption: node suspect on {}: hang"
    taken = {"nodes": [
        dead("h1", ip[head], suspect_on.format(head)),  # the head's instance, at its own address
        dead("w1", ip[one], suspect_on.format(other)),  # the worker at one's address names the other
        dead("x1", "10.9.9.9", suspect_on.format(other)),  # a node no worker task ever had (a job's own raylet)
        {**dead("h2", ip[head], suspect_on.format(head)), "head": True},  # Ray says it is the head
    ]}  # fmt: skip
    lines = replace_suspects(taken, "rf", Aws("us-east-1"), set(), [WORKERS])
    assert lines == [
        f"suspect node h1 names {head}: not taken out: no task of {WORKERS} has address {ip[head]}: "
        "not a worker of this deployment",
        f"suspect node w1 names {other}: not taken out: the message names {other}, but the worker at {ip[one]} "
        f"ran on {one}",
        f"suspect node x1 names {other}: not taken out: no task of {WORKERS} has address 10.9.9.9: "
        "not a worker of this deployment",
        f"suspect node h2 names {head}: not taken out: it is the head",
    ]
    containers, health = states(deployment)
    assert set(containers.values()) == {"ACTIVE"} and set(health.values()) == {"HEALTHY"}


def test_a_host_mode_worker_is_found_by_its_instances_address(deployment):
    """On EFA the worker task uses the host's network: the node's address is the instance's own."""
    ecs = deployment["ecs"]
    (head,) = [deployment["head"]]
    arn = ecs.list_container_instances(cluster="rf")["containerInstanceArns"]
    described = ecs.describe_container_instances(cluster="rf", containerInstances=arn)["containerInstances"]
    head_arn = next(c["containerInstanceArn"] for c in described if c["ec2InstanceId"] == head)
    ecs.start_task(cluster="rf", taskDefinition="rf-head", containerInstances=[head_arn], group=f"service:{WORKERS}")
    accepted = suspect.worker_instance_at(deployment["ip"][head], head, "rf", [WORKERS], Aws("us-east-1"))
    assert accepted == (True, "")  # a task of the worker service in host mode on that instance


def test_an_instance_ecs_does_not_know_is_said_and_the_group_is_still_told(moto, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    for key, value in moto.as_identity("control").items():  # the control task's code, as its role (IAM enforced)
        monkeypatch.setenv(key, value)
    moto.client("ecs").create_cluster(clusterName="rf")
    done = suspect.take_out("i-0123456789abcdef0", "rf", Aws("us-east-1"))
    assert done[0] == "no ECS container instance of i-0123456789abcdef0 in cluster rf"
    assert done[1].startswith("could not mark i-0123456789abcdef0 Unhealthy: ")  # not in any group: one line, no raise
