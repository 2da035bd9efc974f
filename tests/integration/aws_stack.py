"""What `make deploy` would leave behind, created in a real moto_server: the ops verbs' test bed."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

REGION = "us-east-1"
CLUSTER = "rf-test"


def _task_definition(ecs, family: str, container: str, command: list[str], gpu: bool, log_group: str) -> str:
    definition = {
        "name": container,
        "image": f"123456789012.dkr.ecr.{REGION}.amazonaws.com/rayfleet-{container}:abc1234",
        "cpu": 256,  # small enough that moto's fixed instance sizes hold head, workers and trainers
        "memory": 1024,
        "command": command,
        "logConfiguration": {"logDriver": "awslogs", "options": {
            "awslogs-group": log_group, "awslogs-region": REGION, "awslogs-stream-prefix": "trainer"}},
    }  # fmt: skip
    if gpu:
        definition["resourceRequirements"] = [{"type": "GPU", "value": "1"}]
    return ecs.register_task_definition(
        family=family, networkMode="awsvpc", requiresCompatibilities=["EC2"], containerDefinitions=[definition]
    )["taskDefinition"]["taskDefinitionArn"]


def create(moto, directory: Path) -> dict:
    """Create the stack; write and return the Terraform-style outputs file's content."""
    # moto moves a task one lifecycle step on every describe; ECS tasks run until stopped. Keep them running.
    request = urllib.request.Request(
        f"{moto.url}/moto-api/state-manager/set-transition",
        data=json.dumps({"model_name": "ecs::task", "transition": {"progression": "manual", "times": 10**9}}).encode(),
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()
    ec2, ecs, s3, logs = (moto.client(s) for s in ("ec2", "ecs", "s3", "logs"))
    vpc = ec2.create_vpc(CidrBlock="10.20.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # Cloud Map needs it; so does moto
    subnets = [ec2.create_subnet(VpcId=vpc, CidrBlock=f"10.20.{i}.0/24")["Subnet"]["SubnetId"] for i in (1, 2)]
    sg = ec2.create_security_group(GroupName="rf-tasks", Description="ray tasks", VpcId=vpc)["GroupId"]
    moto.client("servicediscovery").create_private_dns_namespace(Name="rf-test.local", Vpc=vpc)
    ecs.create_cluster(clusterName=CLUSTER)
    for instance_type, gpus in (("m5.xlarge", 0), ("g5.xlarge", 1), ("g5.xlarge", 1)):
        instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType=instance_type,
                                     SubnetId=subnets[0])["Instances"][0]  # fmt: skip
        document = json.dumps({"instanceId": instance["InstanceId"], "instanceType": instance_type, "region": REGION})
        resources = [{"name": "GPU", "type": "STRINGSET", "stringSetValue": [f"GPU-{i}" for i in range(gpus)]}]
        ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=document,
                                        totalResources=resources if gpus else [])  # fmt: skip
    log_group = f"/rayfleet/{CLUSTER}/trainer"
    logs.create_log_group(logGroupName=log_group)
    head = _task_definition(ecs, "rf-test-head", "ray-head", ["head"], False, log_group)
    worker = _task_definition(ecs, "rf-test-worker", "ray-worker", ["worker"], True, log_group)
    trainer = _task_definition(ecs, "rf-test-trainer", "trainer", ["ddp"], False, log_group)
    network = {"awsvpcConfiguration": {"subnets": subnets, "securityGroups": [sg], "assignPublicIp": "DISABLED"}}
    ecs.create_service(cluster=CLUSTER, serviceName="rf-test-head", taskDefinition=head, desiredCount=1,
                       networkConfiguration=network)  # fmt: skip
    ecs.create_service(cluster=CLUSTER, serviceName="rf-test-worker", taskDefinition=worker, desiredCount=2,
                       networkConfiguration=network)  # fmt: skip
    # moto's services start no tasks; start them as the ECS service scheduler does (group service:<name>).
    for service, definition, count in (("rf-test-head", head, 1), ("rf-test-worker", worker, 2)):
        ecs.run_task(cluster=CLUSTER, taskDefinition=definition, count=count, group=f"service:{service}",
                     startedBy="ecs-svc/0123456789", networkConfiguration=network)  # fmt: skip
    s3.create_bucket(Bucket="rf-test-results")
    secret = moto.client("secretsmanager").create_secret(Name="rf-test/ray-auth-token-x1", SecretString="t0" * 24)
    outputs = {
        "region": REGION, "cluster_name": CLUSTER, "private_subnet_ids": subnets, "task_security_group_id": sg,
        "trainer_task_definition": trainer, "head_service_name": "rf-test-head",
        "worker_service_name": "rf-test-worker", "results_bucket": "rf-test-results", "trainer_log_group": log_group,
        "ray_token_secret_arn": secret["ARN"], "worker_instance_type": "g5.xlarge",
    }  # fmt: skip
    # The shape `terraform output -json` prints.
    path = directory / "outputs.json"
    path.write_text(json.dumps({k: {"value": v, "type": "string", "sensitive": False} for k, v in outputs.items()}))
    return {**outputs, "outputs_file": str(path)}
