"""Worker groups as Ray sees them: the contract between whatever starts a worker node (the local cluster,
the ECS worker task), and whatever places work on a group (the jobs' Ray Train workers, the launchers'
placement groups, the queue's admission probe).

Each worker node carries one Ray label, GROUP_LABEL=<its group's name>; a run that names a group (a recipe's
`resources.group`, passed to its job as GROUP_VAR) asks Ray for bundles with that label only, so Ray itself
never places its workers anywhere else. A run that names none goes wherever its resources fit, as before.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from rayfleet.core.errors import ConfigError

GROUP_LABEL = "rayfleet.io/group"
GROUP_VAR = "RAYFLEET_WORKER_GROUP"  # a job's environment: the group its workers go to ("" or unset: any)
DEFAULT = "default"  # the group of a cluster started without groups
# A group with `models = true` runs ray-worker:<image tag> + this suffix, the image with the preloaded models
# (infra/modules/ray/task_definitions.tf adds it; rayfleet/ops/image_models.py builds and pushes it).
MODELS_TAG_SUFFIX = "-models"
# A Ray label value (Kubernetes' syntax), kept lower-case so that a name is one thing in Terraform, ECS and Ray.
NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"worker group {name!r}: a name is 1-63 lower-case letters, digits and '-', starting and ending "
            "with a letter or digit"
        )
    return name


def node_labels(group: str) -> dict[str, str]:
    """The labels of a worker node of `group`."""
    return {GROUP_LABEL: check_name(group)}


def selector(group: str | None) -> dict[str, str] | None:
    """The label selector of work placed on `group` (None: anywhere)."""
    return {GROUP_LABEL: group} if group else None


def bundle_selectors(group: str | None, bundles: int) -> dict:
    """placement_group()'s keyword for `bundles` bundles on `group`'s nodes only ({}: anywhere)."""
    return {"bundle_label_selector": [{GROUP_LABEL: group} for _ in range(bundles)]} if group else {}


def from_env(env: dict) -> str | None:
    """The group a job's workers go to, from its environment (GROUP_VAR), checked; None: any."""
    value = env.get(GROUP_VAR) or ""
    return check_name(value) if value else None


# The control task's view of the deployment's groups, from its task definition (infra/modules/ray): each
# group's ECS service, one node's shape, its min and max nodes, and the idle minutes before autostop.
ECS_GROUPS_VAR = "RAYFLEET_WORKER_GROUPS"


@dataclass(frozen=True)
class EcsGroup:
    name: str
    service: str
    vcpus: float
    gpus: int
    memory_mib: float | None
    min: int
    max: int
    idle_minutes: float


def ecs_groups_from(env: dict) -> dict[str, EcsGroup]:
    """The groups ECS_GROUPS_VAR names ({} outside ECS); ConfigError on a value Terraform would not write."""
    raw = env.get(ECS_GROUPS_VAR) or ""
    if not raw:
        return {}
    try:
        groups = json.loads(raw)
        return {
            check_name(name): EcsGroup(
                name,
                str(g["service"]),
                float(g["vcpus"]),
                int(g["gpus"]),
                float(g["memory_mib"]) if g.get("memory_mib") else None,
                int(g.get("min") or 0),
                int(g["max"]),
                float(g.get("idle_minutes") or 0),
            )
            for name, g in sorted(groups.items())
        }
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ConfigError(f"{ECS_GROUPS_VAR} is not the map of groups Terraform writes ({exc!r})") from None
