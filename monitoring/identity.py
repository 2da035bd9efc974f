"""Who is publishing: cluster, instance and run, from ECS task metadata and the host's identity file (never
hard-coded, never IMDS).

Environment variables win (RAYFLEET_CLUSTER_NAME, RAYFLEET_INSTANCE_ID, RAYFLEET_INSTANCE_TYPE,
RAYFLEET_RUN_NAME). On ECS the task metadata endpoint (ECS_CONTAINER_METADATA_URI_V4) names the cluster, and
the instance comes from RAYFLEET_IDENTITY_FILE: JSON with `instance_id` and `instance_type` that the
container instance writes at boot (infra/modules/cluster/user_data.sh.tftpl) and the worker task mounts
read-only. The instance metadata service is never asked: it is closed to every container, because it hands
out the instance role's credentials. Without the file the hostname stands in for the instance id, said once
on stderr, so metrics keep flowing; a laptop asks nothing at all.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Identity:
    cluster_name: str
    instance_id: str
    instance_type: str
    run_name: str | None = None


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def _identity_file(path: str) -> dict[str, str]:
    try:
        found = json.loads(Path(path).read_text())
        return {key: str(found[key]) for key in ("instance_id", "instance_type") if found.get(key)}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        print(f"gpu-metrics: no instance identity from {path} ({exc}); using the hostname", file=sys.stderr)
        return {}


def discover(env: dict | None = None, timeout: float = 2.0) -> Identity:
    env = dict(os.environ if env is None else env)
    cluster = env.get("RAYFLEET_CLUSTER_NAME")
    instance_id = env.get("RAYFLEET_INSTANCE_ID")
    instance_type = env.get("RAYFLEET_INSTANCE_TYPE")
    task_metadata = env.get("ECS_CONTAINER_METADATA_URI_V4")
    if task_metadata and not cluster:
        cluster = json.loads(_get(f"{task_metadata}/task", timeout))["Cluster"].rsplit("/", 1)[-1]
    identity_file = env.get("RAYFLEET_IDENTITY_FILE")
    if identity_file and not (instance_id and instance_type):
        found = _identity_file(identity_file)
        instance_id = instance_id or found.get("instance_id")
        instance_type = instance_type or found.get("instance_type")
    return Identity(
        cluster_name=cluster or "local",
        instance_id=instance_id or socket.gethostname(),
        instance_type=instance_type or "unknown",
        run_name=env.get("RAYFLEET_RUN_NAME") or None,
    )
