"""A suspect worker's instance is taken out by the control task (`replace_suspects` of
rayfleet/node/head_snapshot.py, rayfleet/node/suspect.py) against a real moto_server: from the snapshot's
dead node whose drain message names it, its ECS container instance goes DRAINING and its Auto Scaling group
sees it Unhealthy, once, and nothing else is touched. What moto cannot show: the group actually terminating
and replacing the instance, and IAM allowing exactly these calls to the control role only (infra/modules/iam,
checked by the Terraform tests)."""

from __future__ import annotations

import pytest

from rayfleet.core.aws import Aws
from rayfleet.node import suspect
from rayfleet.node.head_snapshot import replace_suspects

pytestmark = pytest.mark.integration


def test_the_suspect_instance_is_drained_in_ecs_and_marked_unhealthy_in_its_group(moto, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    ec2, ecs, autoscaling = moto.client("ec2"), moto.client("ecs"), moto.client("autoscaling")
    template = ec2.create_launch_template(
        LaunchTemplateName="rf-workers", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}
    )["LaunchTemplate"]
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName="rf-workers-1",
        LaunchTemplate={"LaunchTemplateId": template["LaunchTemplateId"]},
        MinSize=2,
        MaxSize=2,
        AvailabilityZones=["us-east-1a"],
    )
    instances = [i["InstanceId"] for i in autoscaling.describe_auto_scaling_instances()["AutoScalingInstances"]]
    ecs.create_cluster(clusterName="rf")
    for instance in instances:
        document = f'{{"instanceId": "{instance}", "instanceType": "g5.xlarge", "region": "us-east-1"}}'
        ecs.register_container_instance(cluster="rf", instanceIdentityDocument=document)
    bad, good = instances

    taken = {"nodes": [
        {"node_id": "a1", "alive": False, "message": f"Terminated due to preemption: node suspect on {bad}: GPU 0 lost"},  # noqa: E501
        {"node_id": "b2", "alive": False, "message": "Terminated due to preemption: the task was stopped (SIGTERM)"},
        {"node_id": "c3", "alive": True},
    ]}  # fmt: skip
    handled: set[str] = set()
    done = replace_suspects(taken, "rf", Aws("us-east-1"), handled)
    assert replace_suspects(taken, "rf", Aws("us-east-1"), handled) == []  # once per instance

    assert done == [
        f"ECS container instance of {bad} set DRAINING",
        f"{bad} marked Unhealthy: its Auto Scaling group replaces it",
    ]
    arns = ecs.list_container_instances(cluster="rf")["containerInstanceArns"]
    described = ecs.describe_container_instances(cluster="rf", containerInstances=arns)["containerInstances"]
    assert {c["ec2InstanceId"]: c["status"] for c in described} == {bad: "DRAINING", good: "ACTIVE"}
    found = autoscaling.describe_auto_scaling_instances()["AutoScalingInstances"]
    health = {i["InstanceId"]: i["HealthStatus"].upper() for i in found}  # the API's spelling varies in case
    assert health == {bad: "UNHEALTHY", good: "HEALTHY"}


def test_an_instance_ecs_does_not_know_is_said_and_the_group_is_still_told(moto, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.url)
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(key, value)
    moto.client("ecs").create_cluster(clusterName="rf")
    done = suspect.take_out("i-0123456789abcdef0", "rf", Aws("us-east-1"))
    assert done[0] == "no ECS container instance of i-0123456789abcdef0 in cluster rf"
    assert done[1].startswith("could not mark i-0123456789abcdef0 Unhealthy: ")  # not in any group: one line, no raise
