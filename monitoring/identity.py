"""Who is publishing: cluster, instance and run, from ECS task metadata and IMDSv2 (never hard-coded).

Environment variables win (RAYFLEET_CLUSTER_NAME, RAYFLEET_INSTANCE_ID, RAYFLEET_INSTANCE_TYPE,
RAYFLEET_RUN_NAME). On ECS the task metadata endpoint (ECS_CONTAINER_METADATA_URI_V4) names the cluster and
IMDSv2 the instance; the instance metadata service is only asked when running under ECS or when
RAYFLEET_IMDS_ENDPOINT points somewhere, so a laptop never waits on 169.254.169.254.
"""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from dataclasses import dataclass

IMDS_DEFAULT = "http://169.254.169.254"


@dataclass(frozen=True)
class Identity:
    cluster_name: str
    instance_id: str
    instance_type: str
    run_name: str | None = None


def _get(url: str, timeout: float, headers: dict | None = None, method: str = "GET") -> str:
    request = urllib.request.Request(url, headers=headers or {}, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.read().decode()


def _imds(endpoint: str, timeout: float) -> dict[str, str]:
    token = _get(f"{endpoint}/latest/api/token", timeout, {"X-aws-ec2-metadata-token-ttl-seconds": "300"}, "PUT")
    headers = {"X-aws-ec2-metadata-token": token}
    return {
        key: _get(f"{endpoint}/latest/meta-data/{key}", timeout, headers) for key in ("instance-id", "instance-type")
    }


def discover(env: dict | None = None, timeout: float = 2.0) -> Identity:
    env = dict(os.environ if env is None else env)
    cluster = env.get("RAYFLEET_CLUSTER_NAME")
    instance_id = env.get("RAYFLEET_INSTANCE_ID")
    instance_type = env.get("RAYFLEET_INSTANCE_TYPE")
    task_metadata = env.get("ECS_CONTAINER_METADATA_URI_V4")
    if task_metadata and not cluster:
        cluster = json.loads(_get(f"{task_metadata}/task", timeout))["Cluster"].rsplit("/", 1)[-1]
    imds = env.get("RAYFLEET_IMDS_ENDPOINT") or (IMDS_DEFAULT if task_metadata else None)
    if imds and not (instance_id and instance_type):
        found = _imds(imds.rstrip("/"), timeout)
        instance_id = instance_id or found["instance-id"]
        instance_type = instance_type or found["instance-type"]
    return Identity(
        cluster_name=cluster or "local",
        instance_id=instance_id or socket.gethostname(),
        instance_type=instance_type or "unknown",
        run_name=env.get("RAYFLEET_RUN_NAME") or None,
    )
