"""Rotate the ECS cluster's Ray auth token: a new secret version, then the head, then every other holder restarted.

    rayfleet token rotate [--force] [--outputs FILE]

1. Refuses while a job's trainer runs (it would lose the cluster mid-run) or `make serve` keeps a served
   application (rayfleet/core/serve_kept.py: it would stop answering until the new head has it again) unless --force.
2. Writes a new random token as the secret's current version (Secrets Manager; the token is never printed,
   logged or stored anywhere else).
3. Forces a new deployment of the head service and waits until every head task is a new one: ECS hands new
   tasks the current secret version at start.
4. Only then does the same for every other service whose task definition reads the token (its `secrets`):
   the workers, which join the new head with the new token, and the control task (`ray-control`), which
   reads it once at start for the head's dashboard (rayfleet/node/control/head_snapshot.py): left running, its
   snapshot, autostop, the queue's capacity and driver dispatch would all be refused by the new head.
The holders come from the cluster's services and their task definitions, not from a list kept here, so a
service that starts reading the token is restarted too. Trainer tasks started afterwards read the new
version. Old versions stay as AWSPREVIOUS until the next rotation; nothing running uses them (with --force,
a running job's trainer keeps the old one and fails with its head).
"""

from __future__ import annotations

import secrets
import time

from rayfleet.core import serve_kept as kept
from rayfleet.core.aws import Aws
from rayfleet.core.errors import RayfleetError
from rayfleet.core.moved import gone
from rayfleet.ecs.outputs import Outputs
from rayfleet.ecs.tasks import running_tasks


def new_token() -> str:
    """A fresh Ray token: 64 hex characters (256 bits). The one generator, for the seed and every rotation."""
    return secrets.token_hex(32)


def seed_token(client, secret_arn: str, say=print, what: str = "the Ray token") -> str | None:
    """Give the token secret its first value, once: only when it has no AWSCURRENT version. `make deploy` calls
    it after every apply; Terraform makes the secret and its policy but never writes or reads the value (its
    secret-version resource reads it back with GetSecretValue, which the policy denies to all but the
    execution role). A rotated token is never overwritten, and nothing here reads a value: DescribeSecret
    lists the versions' stages, PutSecretValue writes. Returns the new version id, or None when one was
    already current. The Serve API key's secret (`what`) is seeded the same way. `client` is a Secrets
    Manager client (the rehearsal seeds its moto secret with it too)."""
    if _has_current(client, secret_arn, what, say):
        return None
    version = client.put_secret_value(SecretId=secret_arn, SecretString=new_token())["VersionId"]
    say(f"seeded {what}: {secret_arn} version {version} (the value is never printed)")
    return version


def _has_current(client, secret_arn: str, what: str, say) -> bool:
    stages = client.describe_secret(SecretId=secret_arn).get("VersionIdsToStages") or {}
    if any("AWSCURRENT" in labels for labels in stages.values()):
        say(f"{what}: the secret already has a current value ({len(stages)} version(s)); kept as it is")
        return True
    return False


def seed_store_token(secretsmanager, elasticache, secret_arn: str, group_id: str, say=print) -> str | None:
    """The GCS store's AUTH token (infra/modules/gcs_store), once, as seed_token: ElastiCache gets it first
    (ModifyReplicationGroup; ROTATE adds AUTH to a group that has TLS and no token yet), then the secret the
    head reads. In that order a failure between the two leaves the secret without a value, so the next
    `make deploy` sets a new token on both; never a secret holding a token the store refuses. Returns the
    secret's new version id, or None when it already had a current one."""
    what = "the GCS store's token"
    if _has_current(secretsmanager, secret_arn, what, say):
        return None
    token = new_token()  # 64 hex characters: within ElastiCache's 16-128 printable, none of @ " /
    elasticache.modify_replication_group(
        ReplicationGroupId=group_id, AuthToken=token, AuthTokenUpdateStrategy="ROTATE", ApplyImmediately=True
    )
    version = secretsmanager.put_secret_value(SecretId=secret_arn, SecretString=token)["VersionId"]
    say(f"seeded {what}: set on {group_id} and in {secret_arn} version {version} (the value is never printed)")
    return version


def reads_secret(definition: dict, secret_arn: str) -> bool:
    """Whether a task definition hands `secret_arn` to any of its containers (a JSON key of it included:
    `<arn>:<key>::`)."""
    return any(
        s.get("valueFrom") == secret_arn or str(s.get("valueFrom", "")).startswith(secret_arn + ":")
        for c in definition.get("containerDefinitions", [])
        for s in c.get("secrets") or []
    )


def token_holders(ecs, out: Outputs, secret_arn: str) -> list[str]:
    """The cluster's services whose task definition reads the token, the head first (the others need the
    new head to take the new token), then the rest in name order."""
    pages = ecs.get_paginator("list_services").paginate(cluster=out.cluster_name)
    arns = [arn for page in pages for arn in page["serviceArns"]]
    holders = []
    for start in range(0, len(arns), 10):  # DescribeServices takes at most 10
        for service in ecs.describe_services(cluster=out.cluster_name, services=arns[start : start + 10])["services"]:
            if service.get("status") != "ACTIVE":
                continue
            definition = ecs.describe_task_definition(taskDefinition=service["taskDefinition"])["taskDefinition"]
            if reads_secret(definition, secret_arn):
                holders.append(service["serviceName"])
    return sorted(holders, key=lambda name: (name != out.head_service_name, name))


def service_tasks(ecs, cluster: str, service: str) -> list[dict]:
    """The service's running tasks: ECS gives each the group `service:<name>`."""
    pages = ecs.get_paginator("list_tasks").paginate(cluster=cluster, desiredStatus="RUNNING")
    arns = [arn for page in pages for arn in page["taskArns"]]
    tasks = []
    for start in range(0, len(arns), 100):  # DescribeTasks takes at most 100
        described = ecs.describe_tasks(cluster=cluster, tasks=arns[start : start + 100])["tasks"]
        tasks += [t for t in described if t.get("group") == f"service:{service}"]
    return tasks


def wait_replaced(
    ecs, out: Outputs, service: str, old: set[str], desired: int, poll: float, timeout: float, say
) -> None:
    """Until none of the `service`'s `old` tasks runs and `desired` new ones do."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = service_tasks(ecs, out.cluster_name, service)
        remaining = [t for t in tasks if t["taskArn"] in old]
        new = [t for t in tasks if t["taskArn"] not in old and t.get("lastStatus") == "RUNNING"]
        if not remaining and len(new) >= desired:
            say(f"  {service}: {len(new)} new task(s) running")
            return
        if time.monotonic() > deadline:
            raise RayfleetError(
                f"{service} not replaced after {timeout:.0f}s ({len(remaining)} old, {len(new)} new running); "
                "check `rayfleet status`; the new token is already current, so new tasks will use it"
            )
        time.sleep(poll)


def rotate(aws: Aws, out: Outputs, force: bool = False, say=print, poll: float = 5, timeout: float = 1800) -> dict:
    if not out.ray_token_secret_arn:
        raise RayfleetError(
            "the outputs have no ray_token_secret_arn: run `rayfleet deploy` with this version of infra/"
        )
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    running = running_tasks(ecs, out)
    if running["trainer"] and not force:
        jobs = len(running["trainer"])
        raise RayfleetError(f"{jobs} job(s) running would lose the cluster: wait, `rayfleet deploy stop`, or --force")
    serving = kept.kept(aws.client("s3"), out.results_bucket)
    if serving and not force:
        raise RayfleetError(
            f"run {serving['run']} is served: the restarted head gets it back, but it stops answering meanwhile: "
            "`rayfleet serve down` first, or --force"
        )
    version = aws.client("secretsmanager").put_secret_value(
        SecretId=out.ray_token_secret_arn, SecretString=new_token()
    )["VersionId"]
    say(f"new token written: {out.ray_token_secret_arn} version {version}")
    services = {}
    for service in token_holders(ecs, out, out.ray_token_secret_arn):
        desired = ecs.describe_services(cluster=out.cluster_name, services=[service])["services"][0]["desiredCount"]
        old = {t["taskArn"] for t in service_tasks(ecs, out.cluster_name, service)}
        ecs.update_service(cluster=out.cluster_name, service=service, forceNewDeployment=True)
        say(f"restarting {service} ({desired} task(s)) ...")
        wait_replaced(ecs, out, service, old, desired, poll, timeout, say)
        services[service] = {"service": service, "tasks": desired}
    return {"secret_version": version, "restarted": services}


def rotate_token(force: bool = False, outputs: str | None = None, poll_s: float = 5.0) -> int:
    """`rayfleet token rotate`: a new token in the secret, every service restarted with it, in order."""
    out = Outputs.load(outputs)
    result = rotate(Aws(out.region), out, force=force, poll=poll_s)
    restarted = ", ".join(result["restarted"]) or "no service"
    print(f"rotated: secret version {result['secret_version']}; restarted with it, in this order: {restarted}")
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ecs.rotate_token", "rayfleet token rotate")
