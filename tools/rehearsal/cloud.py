"""The rehearsal's AWS: a moto server in this process, holding what `make deploy` would have created.

moto serves ECS, S3, Secrets Manager, CloudWatch Logs, CloudWatch, Cloud Map and EC2 on one port, bound to
loopback and to the rehearsal network's gateway address, through which the containers reach it. It runs inside the
rehearsal's own process, so it stops with it, and so the agent can record what moto's API has no call
for. Those few writes into moto's ECS backend are all in `Moto` below (the ECS agent records them with
SubmitTaskStateChange / SubmitContainerStateChange, which moto does not implement):

  * a stopped task's container exit codes and last status (moto reports exitCode 0 for every container);
  * a service's runningCount and pendingCount (moto sets runningCount = desiredCount on UpdateService);
  * a container instance's registered CPU and memory (moto registers every instance as 4 vCPU / 7482 MiB,
    which places neither the head nor a worker of the rendered sizes).

Nothing else reaches into moto: the rest goes through the same APIs the laptop verbs use.
"""

from __future__ import annotations

import json
import socket
import threading

import boto3
from botocore.config import Config

from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.ecs.rotate_token import seed_token

ACCOUNT = "123456789012"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
REGISTERED_SHARE = 0.95  # of an instance's nominal memory that its ECS agent registers (an assumption)


IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # Linux: bind an address its interface does not have yet


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; EADDRINUSE (OSError) when the port is taken there."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if host != "127.0.0.1":
        # The podman network's bridge, which carries its gateway address, exists only while a container is
        # attached to it: the socket is bound before, and accepts once the bridge is up.
        sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class Moto:
    """moto_server's app, served from threads of this process on 127.0.0.1:<port> and, for the containers,
    on the podman network's gateway address (the host's end of the rehearsal's own bridge), never on every
    interface: moto checks no credentials, and the agent runs what moto holds."""

    def __init__(self, port: int = 0, gateway: str | None = None):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        class Quiet(MotoRequestHandler):
            def log_request(self, *args, **kwargs):  # one line per request would drown the rehearsal's output
                pass

        app = DomainDispatcherApplication(create_backend_app)
        sockets = [_listen("127.0.0.1", port)]
        try:
            self.port = sockets[0].getsockname()[1]
            if gateway:
                sockets.append(_listen(gateway, self.port))
        except OSError:
            for sock in sockets:
                sock.close()
            raise
        self.hosts = [sock.getsockname()[0] for sock in sockets]
        self.servers = []
        for sock in sockets:
            host = sock.getsockname()[0]
            self.servers.append(
                make_server(host, self.port, app, threaded=True, request_handler=Quiet, fd=sock.fileno())
            )
            sock.close()  # werkzeug serves a duplicate of it
        self.threads = [
            threading.Thread(target=server.serve_forever, name=f"moto-{server.host}", daemon=True)
            for server in self.servers
        ]
        for thread in self.threads:
            thread.start()
        self.region = "us-east-1"
        self._clients: dict[str, object] = {}
        from moto.moto_api import state_manager

        # moto moves a task one lifecycle step on every describe; ECS tasks run until stopped.
        state_manager.set_transition(model_name="ecs::task", transition={"progression": "manual", "times": 10**9})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, service: str):
        if service not in self._clients:
            self._clients[service] = boto3.client(
                service,
                endpoint_url=self.url,
                region_name=self.region,
                aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                config=Config(retries={"mode": "standard", "max_attempts": 3}),
            )
        return self._clients[service]

    def stop(self) -> None:
        for server in self.servers:
            server.shutdown()
            server.server_close()
        for thread in self.threads:
            thread.join(timeout=10)

    # -- what moto's API cannot record (see the module docstring) -----------------------------------------
    def _ecs(self):
        from moto.ecs.models import ecs_backends

        return ecs_backends[ACCOUNT][self.region]

    def _task(self, cluster: str, task_arn: str):
        return self._ecs().tasks.get(cluster, {}).get(task_arn)

    def record_exit(self, cluster: str, task_arn: str, exit_code: int | None) -> None:
        task = self._task(cluster, task_arn)
        if task is not None:
            for container in task.containers:  # moto keeps the first container definition only
                container.exitCode = exit_code
                container.last_status = "STOPPED"

    def record_pending(self, cluster: str, task_arn: str) -> None:
        """moto starts a task RUNNING at RunTask; ECS says PENDING until its containers have started."""
        task = self._task(cluster, task_arn)
        if task is not None:
            task.last_status = "PENDING"

    def record_running(self, cluster: str, task_arn: str, health: str) -> None:
        task = self._task(cluster, task_arn)
        if task is not None:
            task.last_status = "RUNNING"
            task.health_status = health  # DescribeTasks' healthStatus (moto has no such field of its own)
            for container in task.containers:
                container.last_status = "RUNNING"
                container.health_status = health

    def record_service(self, cluster: str, service: str, running: int, pending: int) -> None:
        found = self._ecs().services.get(f"{cluster}:{service}")
        if found is not None:
            found.running_count, found.pending_count = running, pending

    def register_resources(self, cluster: str, instance_arn: str, cpu: int, memory_mib: int, gpus: int) -> None:
        instance = self._ecs().container_instances[cluster][instance_arn.rsplit("/", 1)[-1]]
        for resources in (instance.registered_resources, instance.remaining_resources):
            for resource in resources:
                if resource["name"] == "CPU":
                    resource["integerValue"] = cpu
                elif resource["name"] == "MEMORY":
                    resource["integerValue"] = memory_mib
        gpu = {"name": "GPU", "type": "STRINGSET", "stringSetValue": [f"GPU-{i}" for i in range(gpus)]}
        instance.registered_resources.append(gpu)


def _mapped(value, mapping: dict):
    """Replace the ids and ARNs Terraform recorded with what moto assigned."""
    if isinstance(value, dict):
        return {k: _mapped(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_mapped(v, mapping) for v in value]
    if isinstance(value, str) and value in mapping:
        return mapping[value]
    return value


def deploy(moto: Moto, picture: dict) -> dict:
    """Create the picture in moto, as `make deploy` would in AWS. Returns what the agent and the verbs need:
    {"outputs", "services", "task_definitions", "cluster", "token", "secret_arn"}."""
    moto.region = picture.get("region", "us-east-1")
    ec2, ecs, s3, logs = (moto.client(s) for s in ("ec2", "ecs", "s3", "logs"))
    mapping: dict[str, str] = {}
    # The network: the VPC, its subnets and security groups (moto checks RunTask's against them).
    network = picture.get("network") or {}
    vpc = ec2.create_vpc(CidrBlock=(network.get("vpc") or {}).get("cidrBlock", "10.42.0.0/16"))["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})
    if (network.get("vpc") or {}).get("id"):
        mapping[network["vpc"]["id"]] = vpc
    for subnet in network.get("subnets", []):
        mapping[subnet["id"]] = ec2.create_subnet(VpcId=vpc, CidrBlock=subnet["cidrBlock"])["Subnet"]["SubnetId"]
    for group in network.get("securityGroups", []):
        created = ec2.create_security_group(
            GroupName=group.get("name") or group["key"], Description=group.get("description") or group["key"], VpcId=vpc
        )
        mapping[group["id"]] = created["GroupId"]
    # The token secret as Terraform leaves it (no value), then seeded as `make deploy` seeds it.
    secret_arn = token = None
    for secret in picture["secrets"]:
        client = moto.client("secretsmanager")
        mapping[secret["arn"]] = secret_arn = client.create_secret(Name=secret["name"])["ARN"]
        seed_token(client, secret_arn, say=lambda *_: None)
        token = client.get_secret_value(SecretId=secret_arn)["SecretString"]
    # Cloud Map: the namespace and its services (the head registers there).
    discovery = moto.client("servicediscovery")
    namespace = picture["namespace"]
    operation = discovery.create_private_dns_namespace(Name=namespace["name"], Vpc=vpc)["OperationId"]
    namespace_id = discovery.get_operation(OperationId=operation)["Operation"]["Targets"]["NAMESPACE"]
    registry_arns = {}
    for detail in namespace.get("serviceDetails") or [{"name": n} for n in namespace.get("services", [])]:
        dns = detail.get("dnsConfig") or {"RoutingPolicy": "MULTIVALUE", "DnsRecords": [{"Type": "A", "TTL": 10}]}
        created = discovery.create_service(Name=detail["name"], NamespaceId=namespace_id, DnsConfig=dns)
        registry_arns[detail["name"]] = created["Service"]["Arn"]
        if detail.get("arn"):
            mapping[detail["arn"]] = created["Service"]["Arn"]
    # The cluster and its container instances: one per node group instance the services need.
    cluster = picture["cluster"]["clusterName"]
    ecs.create_cluster(clusterName=cluster)
    needed = {"head": 1, "worker": 0}
    for service in picture["services"]:
        if service["taskDefinition"] == "worker":
            needed["worker"] += service["desiredCount"]
    groups = picture.get("nodeGroups") or {
        "head": {"instanceType": picture.get("headInstanceType", "m5.xlarge")},
        "worker": {"instanceType": picture["workerInstanceType"], "gpuSupport": True},
    }
    for key, group in groups.items():
        for _ in range(needed.get(key, 0)):
            instance_type = group["instanceType"]
            instance = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType=instance_type)
            document = json.dumps(
                {
                    "instanceId": instance["Instances"][0]["InstanceId"],
                    "instanceType": instance_type,
                    "region": moto.region,
                }
            )
            arn = ecs.register_container_instance(cluster=cluster, instanceIdentityDocument=document)[
                "containerInstance"
            ]["containerInstanceArn"]
            facts = INSTANCE_TYPES.get(instance_type, {"vcpus": 4, "memory_mib": 16384, "gpus": 0})
            gpus = facts["gpus"] if group.get("gpuSupport") else 0
            moto.register_resources(
                cluster, arn, facts["vcpus"] * 1024, int(facts["memory_mib"] * REGISTERED_SHARE), gpus
            )
            attributes = group.get("attributes") or {"rayfleet.node-group": key}
            ecs.put_attributes(
                cluster=cluster, attributes=[{"name": k, "value": v, "targetId": arn} for k, v in attributes.items()]
            )
    # Task definitions exactly as rendered, with moto's ARNs where Terraform recorded AWS's.
    registered = {}
    for key, spec in picture["taskDefinitions"].items():
        spec = _mapped(spec, mapping)
        if not spec.get("tags"):
            spec.pop("tags", None)
        registered[key] = ecs.register_task_definition(**spec)["taskDefinition"]
    # Services. moto's CreateService starts no task: the agent does, as ECS's service scheduler would. The
    # capacity providers (Auto Scaling groups) are not modelled; the instances are registered above.
    services = {}
    for service in picture["services"]:
        skip = ("taskDefinition", "serviceRegistries", "cluster", "capacityProviderStrategy")
        spec = _mapped({k: v for k, v in service.items() if k not in skip}, mapping)
        spec["taskDefinition"] = registered[service["taskDefinition"]]["taskDefinitionArn"]
        registries = [
            {"registryArn": registry_arns[r["service"]]}
            for r in service.get("serviceRegistries", [])
            if r.get("service") in registry_arns
        ]
        if registries:
            spec["serviceRegistries"] = registries
        if not spec.get("tags"):
            spec.pop("tags", None)
        ecs.create_service(cluster=cluster, **spec)
        services[service["serviceName"]] = {
            "task_definition": service["taskDefinition"],
            "dns_names": [f"{r['service']}.{r['namespace']}" for r in service.get("serviceRegistries", [])],
            "network": spec.get("networkConfiguration"),
        }
    s3.create_bucket(Bucket=picture["bucket"]["name"])
    for group in picture.get("logGroups", []):
        logs.create_log_group(logGroupName=group["logGroupName"])
        if group.get("retentionInDays"):
            logs.put_retention_policy(logGroupName=group["logGroupName"], retentionInDays=group["retentionInDays"])
    trainer = registered["trainer"]
    outputs = _mapped(dict(picture["outputs"]), mapping)
    outputs["trainer_task_definition"] = f"{trainer['family']}:{trainer['revision']}"
    outputs["ecr_repository_urls"] = {}  # the rehearsal pulls nothing: `make push` has nowhere to go
    return {
        "outputs": outputs,
        "services": services,
        "task_definitions": {k: v["taskDefinitionArn"] for k, v in registered.items()},
        "cluster": cluster,
        "token": token,
        "secret_arn": secret_arn,
    }
