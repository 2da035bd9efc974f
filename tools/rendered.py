"""Terraform's rendered state -> the deployment picture: what a deployment of infra/ consists of, in the
input shapes of the AWS APIs that would create it.

    picture(state)          state: the `terraform show -json` document of an applied infra/

The state comes from a real deployment (`terraform show -json` after `make deploy`) or, offline, from
Terraform applying infra/ with the stand-in providers in render mode (tools/terraform_standin/
render.py). Everything in the picture is read from the state, nothing is re-derived from the .tf files:
the container definitions are the JSON Terraform rendered, the ids and ARNs the ones it recorded.
Consumers: the integration tests' moto stack (tools/moto_stack/stack.py) and the podman rehearsal
(tools/rehearsal), which map the ids AWS assigned onto the ones their own AWS assigns.

The picture (JSON; keys of API inputs as the ECS / EC2 / Cloud Map / Logs / Secrets Manager APIs spell
them; `id` / `arn` fields are what Terraform recorded):

    source, region, account
    network           {"vpc": {"id", "cidrBlock", "enableDnsSupport", "enableDnsHostnames", "tags"},
                       "defaultSecurityGroup": {"id", "tags"},
                       "subnets": [{"id", "key", "tier", "cidrBlock", "availabilityZone", "tags"}],
                       "securityGroups": [{"id", "key", "name", "description", "tags",
                                           "ingress"|"egress": [{"id", "ipProtocol", "fromPort", "toPort",
                                                "cidrIpv4" | "referencedGroupId", "description"}]}]}
    kmsKey            {"arn", "keyId", "description", "alias"}
    cluster           {"clusterName", "arn", "settings", "configuration", "capacityProviders",
                       "defaultCapacityProviderStrategy", "tags"}        (CreateCluster input + arn)
    capacityProviders [{"name", "arn", "nodeGroup", "autoScalingGroupProvider", "tags"}]
    nodeGroups        {key: {"instanceType", "minSize", "maxSize", "subnets", "attributes" (the ECS agent's
                       ECS_INSTANCE_ATTRIBUTES from the launch template's user data), "gpuSupport",
                       "capacityProvider", "autoScalingGroup", "launchTemplate", "amiParameter"?}}
    taskDefinitions   {key: RegisterTaskDefinition input}       key: the resource name (head, control, trainer) or
                      a worker group's node group (worker, worker-<group>)
    taskDefinitionArns {key: ARN}
    services          [CreateService input (in `cluster`; no "cluster" key), except "taskDefinition": its key
                       in taskDefinitions and "serviceRegistries": [{"registryArn", "service": Cloud Map name,
                       "namespace": its name}]]
    namespace         {"name", "id", "arn", "vpc", "description", "tags", "services": [names],
                       "serviceDetails": [{"name", "id", "arn", "dnsConfig", "healthCheckCustomConfig", "tags"}]}
    bucket            {"name", "arn", "tags"}
    logGroups         [{"logGroupName", "retentionInDays", "kmsKeyId", "tags"}]
    secrets           [{"name", "arn", "description", "kmsKeyId", "tags"}]
                      (no value: Terraform never holds the token; `make deploy` seeds it)
    roles             {name: arn}
    repositories      {image: repositoryUri}
    headInstanceType
    outputs           {name: value}      the root outputs, what `terraform output -json` holds
    outputTypes       {name: {"type", "sensitive"}}   the rest of `terraform output -json`
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator

ROLE_OF_FAMILY = ("head", "worker", "trainer")


class NotAPicture(ValueError):
    """The state lacks what a deployment of infra/ has (not an applied infra/?)."""


def resources(state: dict) -> Iterator[dict]:
    """Every managed resource and data source of the state, modules included."""

    def walk(module: dict):
        yield from module.get("resources", [])
        for child in module.get("child_modules", []):
            yield from walk(child)

    yield from walk(state.get("values", {}).get("root_module", {}))


def outputs(state: dict) -> dict:
    """The root module's outputs, {name: value}."""
    return {k: v.get("value") for k, v in state.get("values", {}).get("outputs", {}).items()}


def _tags(values: dict) -> list[dict]:
    """tags_all (the resource's tags and the provider's default_tags) as the ECS / Logs APIs take them."""
    return [
        {"key": k, "value": str(v)} for k, v in sorted((values.get("tags_all") or values.get("tags") or {}).items())
    ]


def _ec2_tags(values: dict) -> list[dict]:
    return [{"Key": t["key"], "Value": t["value"]} for t in _tags(values)]


def _one(blocks):
    return (blocks or [None])[0] or {}


def _compact(d: dict) -> dict:
    return {k: v for k, v in d.items() if v not in (None, [], {}, "")}


class _State:
    def __init__(self, state: dict):
        self.all = [r for r in resources(state) if r.get("mode") == "managed"]
        self.data = [r for r in resources(state) if r.get("mode") == "data"]

    def of(self, type_name: str) -> list[dict]:
        return [r for r in self.all if r["type"] == type_name]

    def one(self, type_name: str, name: str | None = None) -> dict:
        found = [r for r in self.of(type_name) if name is None or r["name"] == name]
        if len(found) != 1:
            raise NotAPicture(f"expected one {type_name}{f'.{name}' if name else ''} in the state, found {len(found)}")
        return found[0]["values"]


def _volume(vol: dict) -> dict:
    docker = _one(vol.get("docker_volume_configuration")) or {}
    return _compact(
        {
            "name": vol.get("name"),
            "host": _compact({"sourcePath": vol.get("host_path")}),
            "dockerVolumeConfiguration": _compact(
                {
                    "scope": docker.get("scope"),
                    "autoprovision": docker.get("autoprovision") if docker.get("scope") == "shared" else None,
                    "driver": docker.get("driver"),
                    "driverOpts": docker.get("driver_opts"),
                    "labels": docker.get("labels"),
                }
            ),
        }
    )


def _task_definition(v: dict) -> dict:
    spec = {
        "family": v["family"],
        "containerDefinitions": json.loads(v["container_definitions"]),
        "networkMode": v.get("network_mode"),
        "requiresCompatibilities": v.get("requires_compatibilities"),
        "executionRoleArn": v.get("execution_role_arn"),
        "taskRoleArn": v.get("task_role_arn"),
        "cpu": v.get("cpu"),
        "memory": v.get("memory"),
        "pidMode": v.get("pid_mode"),
        "ipcMode": v.get("ipc_mode"),
        "placementConstraints": [
            _compact({"type": c.get("type"), "expression": c.get("expression")})
            for c in v.get("placement_constraints") or []
        ],
        "volumes": [_volume(vol) for vol in v.get("volume") or []],
        "tags": _tags(v),
    }
    platform = _one(v.get("runtime_platform"))
    if platform:
        spec["runtimePlatform"] = _compact(
            {
                "cpuArchitecture": platform.get("cpu_architecture"),
                "operatingSystemFamily": platform.get("operating_system_family"),
            }
        )
    return _compact(spec)


def _service(v: dict, task_keys: dict[str, str], registries: dict[str, dict]) -> dict:
    service = {
        "serviceName": v["name"],
        "taskDefinition": task_keys.get(v["task_definition"], v["task_definition"]),
        "desiredCount": v.get("desired_count"),
        "launchType": v.get("launch_type"),
        "schedulingStrategy": v.get("scheduling_strategy"),
        "enableExecuteCommand": v.get("enable_execute_command"),
        "enableECSManagedTags": v.get("enable_ecs_managed_tags"),
        "propagateTags": v.get("propagate_tags"),
        "deploymentConfiguration": _compact(
            {
                "minimumHealthyPercent": v.get("deployment_minimum_healthy_percent"),
                "maximumPercent": v.get("deployment_maximum_percent"),
            }
        ),
        "capacityProviderStrategy": [
            _compact({"capacityProvider": s["capacity_provider"], "weight": s.get("weight"), "base": s.get("base")})
            for s in v.get("capacity_provider_strategy") or []
        ],
        "placementConstraints": [
            _compact({"type": c.get("type"), "expression": c.get("expression")})
            for c in v.get("placement_constraints") or []
        ],
        "placementStrategy": [
            _compact({"type": s.get("type"), "field": s.get("field")})
            for s in v.get("ordered_placement_strategy") or []
        ],
        "tags": _tags(v),
    }
    network = _one(v.get("network_configuration"))
    if network:
        service["networkConfiguration"] = {
            "awsvpcConfiguration": {
                "subnets": list(network.get("subnets") or []),
                "securityGroups": list(network.get("security_groups") or []),
                "assignPublicIp": "ENABLED" if network.get("assign_public_ip") else "DISABLED",
            }
        }
    service["serviceRegistries"] = [
        {"registryArn": r["registry_arn"], **registries.get(r["registry_arn"], {})}
        for r in v.get("service_registries") or []
    ]
    return _compact(service)


def _user_data_settings(user_data: str | None) -> dict[str, str]:
    """ECS agent settings (KEY=value lines) in a launch template's user data."""
    if not user_data:
        return {}
    try:
        text = base64.b64decode(user_data).decode()
    except ValueError:
        text = user_data
    return dict(re.findall(r"^(ECS_[A-Z_]+)=(.*)$", text, re.M))


def _network(s: _State) -> dict:
    vpc = s.one("aws_vpc")
    subnets = [
        {
            "id": r["values"]["id"],
            "key": f"{r['name']}[{r.get('index', 0)}]",
            "tier": (r["values"].get("tags") or {}).get("Tier", r["name"]),
            "cidrBlock": r["values"]["cidr_block"],
            "availabilityZone": r["values"].get("availability_zone"),
            "tags": _ec2_tags(r["values"]),
        }
        for r in s.of("aws_subnet")
    ]
    rules: dict[str, dict[str, list]] = {}
    for direction in ("ingress", "egress"):
        for r in s.of(f"aws_vpc_security_group_{direction}_rule"):
            v = r["values"]
            rule = _compact(
                {
                    "id": v.get("id"),
                    "ipProtocol": v.get("ip_protocol"),
                    "fromPort": v.get("from_port"),
                    "toPort": v.get("to_port"),
                    "cidrIpv4": v.get("cidr_ipv4"),
                    "cidrIpv6": v.get("cidr_ipv6"),
                    "referencedGroupId": v.get("referenced_security_group_id"),
                    "prefixListId": v.get("prefix_list_id"),
                    "description": v.get("description"),
                }
            )
            rules.setdefault(v["security_group_id"], {}).setdefault(direction, []).append(rule)
    groups = [
        {
            "id": r["values"]["id"],
            "key": r["name"],
            "name": r["values"].get("name"),
            "description": r["values"].get("description"),
            "tags": _ec2_tags(r["values"]),
            "ingress": rules.get(r["values"]["id"], {}).get("ingress", []),
            "egress": rules.get(r["values"]["id"], {}).get("egress", []),
        }
        for r in s.of("aws_security_group")
    ]
    network = {
        "vpc": {
            "id": vpc["id"],
            "cidrBlock": vpc["cidr_block"],
            "enableDnsSupport": vpc.get("enable_dns_support"),
            "enableDnsHostnames": vpc.get("enable_dns_hostnames"),
            "tags": _ec2_tags(vpc),
        },
        "subnets": subnets,
        "securityGroups": groups,
    }
    default = [r["values"] for r in s.of("aws_default_security_group")]
    if default:
        network["defaultSecurityGroup"] = {"id": default[0]["id"], "tags": _ec2_tags(default[0])}
    return network


def _node_groups(s: _State) -> tuple[dict, list]:
    templates = {r["values"]["id"]: r for r in s.of("aws_launch_template")}
    groups_by_arn = {r["values"]["arn"]: r for r in s.of("aws_autoscaling_group")}
    ami_parameters = {
        r["values"].get("value"): r["values"].get("name") for r in s.data if r["type"] == "aws_ssm_parameter"
    }
    providers, groups = [], {}
    for r in s.of("aws_ecs_capacity_provider"):
        v = r["values"]
        asg_provider = _one(v.get("auto_scaling_group_provider"))
        scaling = _one(asg_provider.get("managed_scaling"))
        asg = groups_by_arn.get(asg_provider.get("auto_scaling_group_arn"))
        key = r.get("index") or r["name"]
        providers.append(
            {
                "name": v["name"],
                "arn": v["arn"],
                "nodeGroup": key,
                "autoScalingGroupProvider": _compact(
                    {
                        "autoScalingGroupArn": asg_provider.get("auto_scaling_group_arn"),
                        "managedScaling": _compact(
                            {
                                "status": scaling.get("status"),
                                "targetCapacity": scaling.get("target_capacity"),
                                "minimumScalingStepSize": scaling.get("minimum_scaling_step_size"),
                                "maximumScalingStepSize": scaling.get("maximum_scaling_step_size"),
                                "instanceWarmupPeriod": scaling.get("instance_warmup_period"),
                            }
                        ),
                        "managedTerminationProtection": asg_provider.get("managed_termination_protection"),
                        "managedDraining": asg_provider.get("managed_draining"),
                    }
                ),
                "tags": _tags(v),
            }
        )
        if asg is None:
            continue
        a = asg["values"]
        policy = _one(a.get("mixed_instances_policy"))
        spec = _one(_one(policy.get("launch_template")).get("launch_template_specification"))
        template_id = spec.get("launch_template_id") or _one(a.get("launch_template")).get("id")
        template = templates.get(template_id, {}).get("values", {})
        settings = _user_data_settings(template.get("user_data"))
        groups[key] = _compact(
            {
                "instanceType": template.get("instance_type"),
                "minSize": a.get("min_size"),
                "maxSize": a.get("max_size"),
                "subnets": list(a.get("vpc_zone_identifier") or []),
                "attributes": json.loads(settings.get("ECS_INSTANCE_ATTRIBUTES", "{}")),
                "gpuSupport": settings.get("ECS_ENABLE_GPU_SUPPORT") == "true",
                "capacityProvider": v["name"],
                "autoScalingGroup": a.get("name"),
                "launchTemplate": template_id,
                "amiParameter": ami_parameters.get(template.get("image_id")),
            }
        )
        groups[key].setdefault("gpuSupport", False)
    return groups, providers


def _task_key(r: dict) -> str:
    """A task definition's key: its resource name (head, control, trainer); a worker group's, its node group (the
    family after "<name>-ray-": worker for the group named default, worker-<group> for the others)."""
    if r.get("index") is None:
        return r["name"]
    return r["values"]["family"].split("-ray-", 1)[-1]


def picture(state: dict, source: str = "terraform show -json") -> dict:
    """The deployment picture of an applied infra/ (see the module docstring)."""
    s = _State(state)
    out = outputs(state)
    if not s.of("aws_ecs_task_definition"):
        raise NotAPicture("no aws_ecs_task_definition in the state: is it an applied infra/?")
    region = out.get("region") or next((r["values"]["name"] for r in s.data if r["type"] == "aws_region"), "us-east-1")
    account = next((r["values"]["account_id"] for r in s.data if r["type"] == "aws_caller_identity"), None)

    task_defs = {_task_key(r): r["values"] for r in s.of("aws_ecs_task_definition")}
    task_keys = {v["arn"]: key for key, v in task_defs.items()}
    namespace = s.one("aws_service_discovery_private_dns_namespace")
    discovery = [r["values"] for r in s.of("aws_service_discovery_service")]
    registries = {
        d["arn"]: {"service": d["name"], "namespace": namespace["name"]}
        for d in discovery
        if _one(d.get("dns_config")).get("namespace_id") == namespace["id"]
    }
    cluster = s.one("aws_ecs_cluster")
    associations = [r["values"] for r in s.of("aws_ecs_cluster_capacity_providers")]
    exec_config = _one(_one(cluster.get("configuration")).get("execute_command_configuration"))
    exec_logs = _one(exec_config.get("log_configuration"))
    node_groups, providers = _node_groups(s)
    key = s.one("aws_kms_key")
    aliases = [
        r["values"] for r in s.of("aws_kms_alias") if r["values"].get("target_key_id") in (key["key_id"], key["arn"])
    ]
    bucket = s.one("aws_s3_bucket")
    secrets = []
    for r in s.of("aws_secretsmanager_secret"):
        v = r["values"]
        secret = _compact(
            {
                "name": v["name"],
                "arn": v["arn"],
                "description": v.get("description"),
                "kmsKeyId": v.get("kms_key_id"),
                "tags": _tags(v),
            }
        )
        secrets.append(secret)

    return {
        "source": source,
        "region": region,
        "account": account,
        "network": _network(s),
        "kmsKey": _compact(
            {
                "arn": key["arn"],
                "keyId": key["key_id"],
                "description": key.get("description"),
                "alias": aliases[0]["name"] if aliases else None,
            }
        ),
        "cluster": _compact(
            {
                "clusterName": cluster["name"],
                "arn": cluster["arn"],
                "settings": [{"name": x["name"], "value": x["value"]} for x in cluster.get("setting") or []],
                "configuration": {
                    "executeCommandConfiguration": _compact(
                        {
                            "kmsKeyId": exec_config.get("kms_key_id"),
                            "logging": exec_config.get("logging"),
                            "logConfiguration": _compact(
                                {
                                    "cloudWatchLogGroupName": exec_logs.get("cloud_watch_log_group_name"),
                                    "cloudWatchEncryptionEnabled": exec_logs.get("cloud_watch_encryption_enabled"),
                                    "s3BucketName": exec_logs.get("s3_bucket_name"),
                                }
                            ),
                        }
                    )
                }
                if exec_config
                else None,
                "capacityProviders": [p for a in associations for p in a.get("capacity_providers") or []],
                "defaultCapacityProviderStrategy": [
                    _compact(
                        {"capacityProvider": d["capacity_provider"], "weight": d.get("weight"), "base": d.get("base")}
                    )
                    for a in associations
                    for d in a.get("default_capacity_provider_strategy") or []
                ],
                "tags": _tags(cluster),
            }
        ),
        "capacityProviders": providers,
        "nodeGroups": node_groups,
        "taskDefinitions": {key: _task_definition(v) for key, v in task_defs.items()},
        "taskDefinitionArns": {key: v["arn"] for key, v in task_defs.items()},
        "services": [_service(r["values"], task_keys, registries) for r in s.of("aws_ecs_service")],
        "namespace": _compact(
            {
                "name": namespace["name"],
                "id": namespace["id"],
                "arn": namespace["arn"],
                "vpc": namespace.get("vpc"),
                "description": namespace.get("description"),
                "tags": _tags(namespace),
                "services": sorted(r["service"] for r in registries.values()),
                "serviceDetails": [
                    _compact(
                        {
                            "name": d["name"],
                            "id": d["id"],
                            "arn": d["arn"],
                            "dnsConfig": {
                                "RoutingPolicy": _one(d.get("dns_config")).get("routing_policy"),
                                "DnsRecords": [
                                    {"Type": x["type"], "TTL": x["ttl"]}
                                    for x in _one(d.get("dns_config")).get("dns_records") or []
                                ],
                            },
                            "healthCheckCustomConfig": _compact(
                                {"FailureThreshold": _one(d.get("health_check_custom_config")).get("failure_threshold")}
                            ),
                            "tags": _tags(d),
                        }
                    )
                    for d in discovery
                    if d["arn"] in registries
                ],
            }
        ),
        "bucket": {"name": bucket["bucket"], "arn": bucket["arn"], "tags": _tags(bucket)},
        "logGroups": [
            _compact(
                {
                    "logGroupName": r["values"]["name"],
                    "retentionInDays": r["values"].get("retention_in_days"),
                    "kmsKeyId": r["values"].get("kms_key_id"),
                    "tags": _tags(r["values"]),
                }
            )
            for r in s.of("aws_cloudwatch_log_group")
        ],
        "secrets": secrets,
        "roles": {r["values"]["name"]: r["values"]["arn"] for r in s.of("aws_iam_role")},
        "repositories": {
            r.get("index") or r["values"]["name"]: r["values"]["repository_url"] for r in s.of("aws_ecr_repository")
        },
        "headInstanceType": node_groups.get("head", {}).get("instanceType"),
        "outputs": out,
        "outputTypes": {
            k: {"type": v.get("type"), "sensitive": bool(v.get("sensitive"))}
            for k, v in state.get("values", {}).get("outputs", {}).items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    """python -m tools.rendered STATE.json: the picture of a `terraform show -json` document."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tools.rendered STATE.json  (terraform show -json > STATE.json)", file=sys.stderr)
        return 2
    with open(args[0]) as handle:
        state = json.load(handle)
    json.dump(picture(state, source=args[0]), sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
