"""What `make deploy` leaves behind, created in moto, as Terraform renders it: the one moto stack, the ops
verbs' test bed in the integration tests and the rehearsal's AWS.

The picture comes from Terraform itself: infra/ applied offline with the stand-in providers in render mode
(tools/terraform_standin/render.py; the default variables unless told otherwise, cached per content)
and turned into API inputs by tools/rendered.py. `create` makes it in moto, in dependency order:

  KMS key and alias; VPC (DNS support and hostnames), every subnet (CIDR, zone, tags), the security groups
  with exactly the rendered rules (moto's default allow-all egress removed, as Terraform removes it) and the
  VPC's default group emptied; the token secret (the rendered name, KMS key and tags, no value, as Terraform
  leaves it), then seeded as `make deploy` seeds it (rayfleet/ecs/rotate_token.py seed_token); every log
  group (retention, key, tags); the Cloud Map namespace and its head service;
  the bucket (versioning, KMS encryption, public access block, tags); the ECS cluster (settings, ECS Exec
  configuration, tags), its capacity providers and their association; one container instance per
  instance the node groups may run (the launch templates' instance types, the Auto Scaling groups'
  max_size), registered with its catalog CPU, memory and GPUs and the ECS agent attributes of the launch
  template's user data; the three task definitions exactly as rendered (container definitions, roles,
  network mode, tags); the head and worker services as rendered; and their tasks, started as ECS's
  service scheduler would (group service:<name>, the services' placement constraints and network).
  Then the outputs file the verbs read: Terraform's root outputs, moto's ids in place of the rendered ones.

Rendered ids are mapped to moto's wherever moto assigns its own (VPC, subnets, security groups, KMS key,
secret ARN, Cloud Map namespace and service, task definition ARNs), inside the container definitions too.

What moto does not hold or cannot represent (the rendered picture keeps it; nothing here checks it):
  * moto_server alone registers every container instance as 4096 CPU / 7482 MiB and places no Ray head of
    Terraform's sizes; the stack therefore needs moto with tools/moto_stack/ecs.py's patches, which honour registered
    resources, GPUs and placement constraints;
  * CreateService keeps neither capacityProviderStrategy, placementConstraints, deploymentConfiguration
    nor enableExecuteCommand (describe_services does not show them), and starts no task: the tasks are
    started here;
  * capacity providers do not scale their Auto Scaling groups; no launch template, Auto Scaling group,
    internet or NAT gateway, route table, VPC endpoint, flow log, ECR repository,
    secret policy, bucket policy or lifecycle, dashboard or alarm is created (the verbs use none of them;
    task definitions name the rendered role ARNs, which moto does not check); the IAM roles and their
    rendered policies are created last, with the operator and an inspector, and enforced (iam.py);
  * instances boot moto's stock AMI, not the SSM parameter's ECS-optimized one;
  * trainer capacity: Terraform sizes the head instance for the head and one trainer (60% / 40% of its
    memory), so a second `rayfleet launch` while one trainer runs would be refused (RESOURCE:MEMORY). The
    tests leave several detached trainers running in one session, so the head group's instances register
    memory for `trainer_slots` trainers beside the head (create(..., trainer_slots=1) is the real size).
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.ecs.rotate_token import seed_token
from tools import rendered
from tools.moto_stack import iam
from tools.terraform_standin.render import ONE_GROUP, rendered_state

REGION = "us-east-1"  # the default variables' region
REGISTERED_SHARE = 0.95  # of an instance's nominal memory that its ECS agent registers (an assumption)
TRAINER_SLOTS = 8  # trainers the head group's instances make room for (see the module docstring)
SERVICE_STARTED_BY = "ecs-svc/0123456789"


def default_picture(*, var_files=(ONE_GROUP,), variables: dict | None = None, infra: Path | None = None) -> dict:
    """The deployment picture of infra/ (or a patched copy) with var_files (default ONE_GROUP, the harness's one
    group; () for infra/'s own defaults: two groups at zero)."""
    kwargs = {"infra": infra} if infra is not None else {}
    state = rendered_state(var_files=var_files, variables=variables, **kwargs)
    label = " ".join(["infra/" if infra is None else str(infra), *map(str, var_files)])
    picture = rendered.picture(state, source=f"{label} rendered by Terraform (stand-in providers, render mode)")
    # The roles and their rendered policies, which the picture does not carry: what create() enforces.
    picture["iam"] = iam.picture_iam(state, picture)
    return picture


def mapped(value, ids: dict):
    """Replace the ids and ARNs Terraform recorded with what moto assigned (inside containers and lists too)."""
    if isinstance(value, dict):
        return {k: mapped(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [mapped(v, ids) for v in value]
    if isinstance(value, str) and value in ids:
        return ids[value]
    return value


def _tag_dict(tags: list[dict]) -> dict:
    return {t["key"]: t["value"] for t in tags}


def _ec2_tag_spec(kind: str, tags: list[dict]) -> list[dict]:
    return [{"ResourceType": kind, "Tags": tags}] if tags else []


def _keep_tasks_running(moto) -> None:
    """moto moves a task one lifecycle step on every describe; ECS tasks run until stopped."""
    request = urllib.request.Request(
        f"{moto.url}/moto-api/state-manager/set-transition",
        data=json.dumps({"model_name": "ecs::task", "transition": {"progression": "manual", "times": 10**9}}).encode(),
        method="POST",
    )
    urllib.request.urlopen(request, timeout=10).close()


def _permission(rule: dict, ids: dict) -> dict:
    permission = {"IpProtocol": rule["ipProtocol"]}
    if rule["ipProtocol"] != "-1":
        permission.update(FromPort=rule["fromPort"], ToPort=rule["toPort"])
    description = {"Description": rule["description"]} if rule.get("description") else {}
    if "cidrIpv4" in rule:
        permission["IpRanges"] = [{"CidrIp": rule["cidrIpv4"], **description}]
    if "cidrIpv6" in rule:
        permission["Ipv6Ranges"] = [{"CidrIpv6": rule["cidrIpv6"], **description}]
    if "referencedGroupId" in rule:
        permission["UserIdGroupPairs"] = [{"GroupId": ids[rule["referencedGroupId"]], **description}]
    if "prefixListId" in rule:
        permission["PrefixListIds"] = [{"PrefixListId": rule["prefixListId"], **description}]
    return permission


def _network(moto, picture: dict, ids: dict) -> None:
    ec2 = moto.client("ec2")
    network = picture["network"]
    vpc = network["vpc"]
    created = ec2.create_vpc(CidrBlock=vpc["cidrBlock"], TagSpecifications=_ec2_tag_spec("vpc", vpc["tags"]))
    ids[vpc["id"]] = vpc_id = created["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsSupport={"Value": bool(vpc.get("enableDnsSupport"))})
    ec2.modify_vpc_attribute(VpcId=vpc_id, EnableDnsHostnames={"Value": bool(vpc.get("enableDnsHostnames"))})
    for subnet in network["subnets"]:
        ids[subnet["id"]] = ec2.create_subnet(
            VpcId=vpc_id,
            CidrBlock=subnet["cidrBlock"],
            AvailabilityZone=subnet["availabilityZone"],
            TagSpecifications=_ec2_tag_spec("subnet", subnet["tags"]),
        )["Subnet"]["SubnetId"]
    default = network.get("defaultSecurityGroup")
    if default:  # aws_default_security_group without rules: Terraform removes every rule of the default group
        group = ec2.describe_security_groups(
            Filters=[{"Name": "vpc-id", "Values": [vpc_id]}, {"Name": "group-name", "Values": ["default"]}]
        )["SecurityGroups"][0]
        ids[default["id"]] = group["GroupId"]
        _revoke_all(ec2, group)
        if default["tags"]:
            ec2.create_tags(Resources=[group["GroupId"]], Tags=default["tags"])
    groups = network["securityGroups"]
    for group in groups:
        ids[group["id"]] = gid = ec2.create_security_group(
            GroupName=group["name"],
            Description=group["description"],
            VpcId=vpc_id,
            TagSpecifications=_ec2_tag_spec("security-group", group["tags"]),
        )["GroupId"]
        # Terraform removes the allow-all egress rule AWS adds to a new group; the rules are its own resources.
        _revoke_all(ec2, ec2.describe_security_groups(GroupIds=[gid])["SecurityGroups"][0])
    for group in groups:  # rules after every group: they reference one another
        gid = ids[group["id"]]
        if group["ingress"]:
            ec2.authorize_security_group_ingress(
                GroupId=gid, IpPermissions=[_permission(r, ids) for r in group["ingress"]]
            )
        if group["egress"]:
            ec2.authorize_security_group_egress(
                GroupId=gid, IpPermissions=[_permission(r, ids) for r in group["egress"]]
            )


def _revoke_all(ec2, group: dict) -> None:
    strip = ("IpRanges", "Ipv6Ranges", "PrefixListIds", "UserIdGroupPairs", "IpProtocol", "FromPort", "ToPort")

    def clean(permissions):
        return [{k: v for k, v in p.items() if k in strip and v != []} for p in permissions]

    if group.get("IpPermissions"):
        ec2.revoke_security_group_ingress(GroupId=group["GroupId"], IpPermissions=clean(group["IpPermissions"]))
    if group.get("IpPermissionsEgress"):
        ec2.revoke_security_group_egress(GroupId=group["GroupId"], IpPermissions=clean(group["IpPermissionsEgress"]))


def _kms(moto, picture: dict, ids: dict) -> None:
    key = picture.get("kmsKey")
    if not key:
        return
    kms = moto.client("kms")
    created = kms.create_key(Description=key.get("description", ""))["KeyMetadata"]
    ids[key["arn"]], ids[key["keyId"]] = created["Arn"], created["KeyId"]
    if key.get("alias"):
        kms.create_alias(AliasName=key["alias"], TargetKeyId=created["KeyId"])


def _secrets(moto, picture: dict, ids: dict) -> dict[str, str]:
    """Every rendered secret, seeded as `make deploy` seeds it: rendered ARN -> its value."""
    values = {}
    client = moto.client("secretsmanager")
    for secret in picture["secrets"]:
        kwargs = {"Description": secret["description"]} if secret.get("description") else {}
        if secret.get("kmsKeyId"):
            kwargs["KmsKeyId"] = ids.get(secret["kmsKeyId"], secret["kmsKeyId"])
        if secret.get("tags"):
            kwargs["Tags"] = [{"Key": t["key"], "Value": t["value"]} for t in secret["tags"]]
        created = client.create_secret(Name=secret["name"], **kwargs)  # as Terraform leaves it: no value
        ids[secret["arn"]] = created["ARN"]
        seed_token(client, created["ARN"], say=lambda *_: None)  # as `make deploy` seeds it
        values[secret["arn"]] = client.get_secret_value(SecretId=created["ARN"])["SecretString"]
    return values


def _logs(moto, picture: dict, ids: dict) -> None:
    logs = moto.client("logs")
    for group in picture["logGroups"]:
        kwargs = {"tags": _tag_dict(group["tags"])} if group.get("tags") else {}
        if group.get("kmsKeyId"):
            kwargs["kmsKeyId"] = ids.get(group["kmsKeyId"], group["kmsKeyId"])
        logs.create_log_group(logGroupName=group["logGroupName"], **kwargs)
        if group.get("retentionInDays"):
            logs.put_retention_policy(logGroupName=group["logGroupName"], retentionInDays=group["retentionInDays"])


def _cloud_map(moto, picture: dict, ids: dict) -> None:
    discovery = moto.client("servicediscovery")
    namespace = picture["namespace"]
    kwargs = {"Description": namespace["description"]} if namespace.get("description") else {}
    if namespace.get("tags"):
        kwargs["Tags"] = [{"Key": t["key"], "Value": t["value"]} for t in namespace["tags"]]
    operation = discovery.create_private_dns_namespace(Name=namespace["name"], Vpc=ids[namespace["vpc"]], **kwargs)[
        "OperationId"
    ]
    namespace_id = discovery.get_operation(OperationId=operation)["Operation"]["Targets"]["NAMESPACE"]
    ids[namespace["id"]] = namespace_id
    for service in namespace.get("serviceDetails", []):
        created = discovery.create_service(
            Name=service["name"],
            NamespaceId=namespace_id,
            DnsConfig=service["dnsConfig"],
            HealthCheckCustomConfig=service.get("healthCheckCustomConfig") or {},
            Tags=[{"Key": t["key"], "Value": t["value"]} for t in service.get("tags", [])],
        )["Service"]
        ids[service["arn"]], ids[service["id"]] = created["Arn"], created["Id"]


def _bucket(moto, picture: dict, ids: dict) -> None:
    s3 = moto.client("s3")
    name = picture["bucket"]["name"]
    s3.create_bucket(Bucket=name)
    s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    key = picture.get("kmsKey")
    if key:
        rule = {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": ids[key["arn"]]}
        s3.put_bucket_encryption(
            Bucket=name,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": rule, "BucketKeyEnabled": True}]
            },
        )
    s3.put_public_access_block(
        Bucket=name,
        PublicAccessBlockConfiguration={
            k: True for k in ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets")
        },
    )
    if picture["bucket"].get("tags"):
        s3.put_bucket_tagging(
            Bucket=name, Tagging={"TagSet": [{"Key": t["key"], "Value": t["value"]} for t in picture["bucket"]["tags"]]}
        )


def _cluster(moto, picture: dict, ids: dict) -> str:
    ecs = moto.client("ecs")
    cluster = mapped(picture["cluster"], ids)
    name = cluster["clusterName"]
    for provider in picture["capacityProviders"]:
        kwargs = {"tags": provider["tags"]} if provider.get("tags") else {}
        ecs.create_capacity_provider(
            name=provider["name"], autoScalingGroupProvider=provider["autoScalingGroupProvider"], **kwargs
        )
    kwargs = {k: cluster[k] for k in ("settings", "configuration", "tags") if cluster.get(k)}
    ecs.create_cluster(clusterName=name, **kwargs)
    if cluster.get("capacityProviders"):
        ecs.put_cluster_capacity_providers(
            cluster=name,
            capacityProviders=cluster["capacityProviders"],
            defaultCapacityProviderStrategy=cluster.get("defaultCapacityProviderStrategy", []),
        )
    return name


def _container_instances(moto, picture: dict, ids: dict, cluster: str, trainer_slots: int) -> None:
    """The instances the capacity providers would bring up: max_size of each node group, head first (moto
    fills instances in registration order; the trainer, which has no placement constraint, lands beside the
    head as Terraform's sizing intends)."""
    ec2, ecs = moto.client("ec2"), moto.client("ecs")
    trainer_mib = max(
        (c.get("memory", 0) for c in picture["taskDefinitions"].get("trainer", {}).get("containerDefinitions", [])),
        default=0,
    )
    order = sorted(picture["nodeGroups"], key=lambda k: (k != "head", k))
    for key in order:
        group = picture["nodeGroups"][key]
        facts = INSTANCE_TYPES[group["instanceType"]]
        memory = int(facts["memory_mib"] * REGISTERED_SHARE) + (
            trainer_mib * (trainer_slots - 1) if key == "head" else 0
        )
        resources = [
            {"name": "CPU", "type": "INTEGER", "integerValue": facts["vcpus"] * 1024},
            {"name": "MEMORY", "type": "INTEGER", "integerValue": memory},
        ]
        if group.get("gpuSupport") and facts["gpus"]:
            resources.append(
                {"name": "GPU", "type": "STRINGSET", "stringSetValue": [f"GPU-{key}-{i}" for i in range(facts["gpus"])]}
            )
        for n in range(group["maxSize"]):
            tags = [{"Key": "Name", "Value": f"{cluster}-{key}"}, {"Key": "NodeGroup", "Value": key}]
            instance = ec2.run_instances(
                ImageId="ami-12c6146b",  # moto's stock AMI; the rendered one comes from an SSM parameter
                MinCount=1,
                MaxCount=1,
                InstanceType=group["instanceType"],
                SubnetId=ids[group["subnets"][n % len(group["subnets"])]],
                TagSpecifications=[{"ResourceType": "instance", "Tags": tags}],
            )["Instances"][0]
            document = {
                "instanceId": instance["InstanceId"],
                "instanceType": group["instanceType"],
                "region": picture["region"],
            }
            ecs.register_container_instance(
                cluster=cluster,
                instanceIdentityDocument=json.dumps(document),
                totalResources=resources,
                attributes=[{"name": k, "value": v} for k, v in group.get("attributes", {}).items()],
            )


def _task_definitions(moto, picture: dict, ids: dict) -> dict[str, dict]:
    ecs = moto.client("ecs")
    registered = {}
    for key, spec in picture["taskDefinitions"].items():
        definition = ecs.register_task_definition(**mapped(spec, ids))["taskDefinition"]
        registered[key] = definition
        ids[picture["taskDefinitionArns"][key]] = definition["taskDefinitionArn"]
        rendered_short = picture["taskDefinitionArns"][key].rsplit("/", 1)[-1]  # family:revision
        ids[rendered_short] = f"{definition['family']}:{definition['revision']}"
    return registered


def _services(moto, picture: dict, ids: dict, cluster: str, registered: dict, start: bool) -> None:
    ecs = moto.client("ecs")
    for service in picture["services"]:
        spec = mapped({k: v for k, v in service.items() if k not in ("taskDefinition", "serviceRegistries")}, ids)
        spec["cluster"] = cluster
        spec["taskDefinition"] = registered[service["taskDefinition"]]["taskDefinitionArn"]
        spec["serviceRegistries"] = [
            {"registryArn": ids[r["registryArn"]]} for r in service.get("serviceRegistries", [])
        ]
        ecs.create_service(**spec)
        if not start or not spec["desiredCount"]:  # a worker group at zero starts nothing
            continue
        # moto's services start no tasks: start them as ECS's service scheduler would.
        run = {
            "cluster": cluster,
            "taskDefinition": spec["taskDefinition"],
            "count": spec["desiredCount"],
            "group": f"service:{spec['serviceName']}",
            "startedBy": SERVICE_STARTED_BY,
            "placementConstraints": spec.get("placementConstraints", []),
            "capacityProviderStrategy": spec.get("capacityProviderStrategy", []),
            "enableExecuteCommand": bool(spec.get("enableExecuteCommand")),
            "propagateTags": "TASK_DEFINITION" if spec.get("propagateTags") == "TASK_DEFINITION" else "NONE",
        }
        if "networkConfiguration" in spec:
            run["networkConfiguration"] = spec["networkConfiguration"]
        started = ecs.run_task(**{k: v for k, v in run.items() if v != []})
        if len(started["tasks"]) != spec["desiredCount"]:
            placed = f"{len(started['tasks'])} of {spec['desiredCount']}"
            raise RuntimeError(f"{spec['serviceName']}: {placed} tasks placed: {started['failures']}")


def _write_outputs(picture: dict, state_outputs: dict, ids: dict, directory: Path) -> dict:
    outputs = mapped(picture["outputs"], ids)
    path = directory / "outputs.json"
    # The shape `terraform output -json` prints: the rendered outputs' types and sensitivity.
    document = {
        name: {
            "sensitive": bool(state_outputs.get(name, {}).get("sensitive")),
            "type": state_outputs.get(name, {}).get("type", "string"),
            "value": value,
        }
        for name, value in outputs.items()
    }
    path.write_text(json.dumps(document, indent=1))
    return {**outputs, "outputs_file": str(path)}


def create(
    moto,
    directory: Path,
    picture: dict | None = None,
    *,
    trainer_slots: int = TRAINER_SLOTS,
    start_services=True,
    enforce_iam=True,
) -> dict:
    """Create the rendered deployment in `moto` (moto with the ECS patches); write the outputs file the verbs
    read into `directory` and return its values, plus "outputs_file", "ids" (rendered id -> moto's), "token",
    "picture", "cluster", "task_definitions" (key -> the registered ARN) and "identities" (iam.py). Created with
    IAM enforcement off, as Terraform's apply; then the rendered roles, the operator and the inspector are
    made and enforcement is turned on (enforce_iam, the default; the picture needs default_picture's "iam").
    start_services=False leaves the services' tasks to a scheduler of the caller's (the rehearsal's agent)."""
    if not getattr(moto, "places_like_ecs", False):
        raise TypeError(
            "stack.create needs moto with tools/moto_stack/ecs.py's patches (the tests' EcsMotoServer, the "
            "rehearsal's Moto): plain moto registers every container instance as 4 vCPU / 7482 MiB and places no "
            "Ray head of Terraform's sizes"
        )
    picture = picture or default_picture()
    if picture["region"] != REGION:
        raise ValueError(f"the picture's region is {picture['region']}; the stack's clients use {REGION}")
    if enforce_iam and "iam" not in picture:
        raise ValueError('stack.create enforces IAM: build the picture with default_picture() (it has "iam")')
    iam.set_enforcement(moto.url, on=False)  # as Terraform's apply; the identities come last
    _keep_tasks_running(moto)
    ids: dict[str, str] = {}
    _kms(moto, picture, ids)
    _network(moto, picture, ids)
    secrets = _secrets(moto, picture, ids)
    token = secrets.get(picture["outputs"].get("ray_token_secret_arn"))
    store = picture["outputs"].get("gcs_store") or {}
    _logs(moto, picture, ids)
    _cloud_map(moto, picture, ids)
    _bucket(moto, picture, ids)
    cluster = _cluster(moto, picture, ids)
    _container_instances(moto, picture, ids, cluster, trainer_slots)
    registered = _task_definitions(moto, picture, ids)
    _services(moto, picture, ids, cluster, registered, start_services)
    outputs = _write_outputs(picture, picture.get("outputTypes", {}), ids, directory)
    definitions = {key: d["taskDefinitionArn"] for key, d in registered.items()}
    identities = iam.enforce(moto, iam.Spec(**picture["iam"])) if enforce_iam else {}
    return {
        **outputs,
        "ids": ids,
        "token": token,
        "gcs_store_token": secrets.get(store.get("secret_arn")),  # the store's AUTH token (gcs_store enabled)
        "picture": picture,
        "cluster": cluster,
        "task_definitions": definitions,
        "identities": identities,
    }
