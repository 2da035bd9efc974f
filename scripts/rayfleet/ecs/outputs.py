"""The names the verbs use, from the Terraform outputs `make deploy` saves (never hard-coded).

Looked up in order: `--outputs FILE`, $RAYFLEET_OUTPUTS, outputs.json in the state folder
(rayfleet/core/local_state.py). The file is what
`terraform output -json` prints ({"name": {"value": ...}}) or a plain {"name": value} mapping.
Single values can be overridden by environment variables: RAYFLEET_<NAME in upper case>.
"""

from __future__ import annotations

import json
import os
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

from rayfleet.core import local_state, worker_groups
from rayfleet.core.aws import MissingOutputs

WORKERS = worker_groups.DEFAULT  # the one worker group Terraform's outputs describe today (its nodes' label)


@dataclass(frozen=True)
class WorkerGroup:
    """One group of worker nodes: its ECS service and container, its instance types and its size."""

    service_name: str
    container_name: str = "ray-worker"
    instance_type: str = ""  # rayfleet run checks a recipe's resources against it
    instance_types: tuple[str, ...] = ()  # with Spot types, all of them: the check uses the smallest
    count: int = 0  # rayfleet deploy start scales the worker service back to it
    lifecycle: str = "on-demand"  # or "spot": rayfleet run prices a run's workers from Spot price history

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(self.instance_types) or ((self.instance_type,) if self.instance_type else ())


# The flat Terraform outputs that make up today's one group, by WorkerGroup field.
GROUP_OUTPUTS = {
    "service_name": "worker_service_name",
    "container_name": "worker_container_name",
    "instance_type": "worker_instance_type",
    "instance_types": "worker_instance_types",
    "count": "worker_count",
    "lifecycle": "worker_lifecycle",
}


@dataclass(frozen=True)
class Outputs:
    region: str
    cluster_name: str
    private_subnet_ids: list[str]
    task_security_group_id: str
    trainer_task_definition: str
    head_service_name: str
    worker_groups: dict[str, WorkerGroup]  # by name; today's deployments have one, WORKERS
    results_bucket: str
    trainer_log_group: str
    control_service_name: str = ""  # the snapshot and autostop (ray-control); "" before issue 27's deployments
    trainer_container_name: str = "trainer"
    trainer_log_stream_prefix: str = "trainer"
    head_container_name: str = "ray-head"
    ray_token_secret_arn: str = ""  # rayfleet token rotate needs it
    ecr_repository_urls: dict | None = None  # make push needs it
    head_instance_type: str = ""  # make start checks the quotas for it
    concurrent_runs: int = 1  # runs whose drivers (trainer tasks) the head instance holds at once
    image_tag: str = ""  # make push marks the deployed tag's images (rayfleet/ops/images.py mark_deployed)
    serve_endpoint: str = ""  # http://head.<namespace>:<port> when serving is on (make serve), else ""
    serve_api_key_secret_arn: str = ""  # the key every Serve request carries
    gcs_store: dict | None = None  # {replication_group_id, secret_arn}: make deploy sets the store's token

    @classmethod
    def load(cls, path: str | Path | None = None) -> Outputs:
        path = Path(path) if path else local_state.outputs_file()
        raw: dict = {}
        if path.is_file():
            try:
                raw = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise MissingOutputs(f"{path} is not JSON ({exc}); run `rayfleet deploy` to write it again") from None
        values = {k: (v["value"] if isinstance(v, dict) and "value" in v else v) for k, v in raw.items()}
        names = [f.name for f in fields(cls) if f.name != "worker_groups"] + list(GROUP_OUTPUTS.values())
        for name in names:
            env = os.environ.get(f"RAYFLEET_{name.upper()}")
            if env:
                values[name] = env.split(",") if name in ("private_subnet_ids", "worker_instance_types") else env
        required = [f.name for f in fields(cls) if f.default is MISSING and f.name not in values]
        required = [GROUP_OUTPUTS["service_name"] if n == "worker_groups" else n for n in required]
        required = [n for n in required if n not in values]
        if required:
            where = str(path) if path.is_file() else f"{path} (missing)"
            raise MissingOutputs(f"Terraform outputs {', '.join(required)} not found in {where}; run `rayfleet deploy`")
        return cls.from_flat(**values)

    @classmethod
    def from_flat(cls, **values) -> Outputs:
        """From Terraform's flat outputs (unknown names ignored): the worker_* ones make the one group."""
        group = {field: values.pop(output) for field, output in GROUP_OUTPUTS.items() if output in values}
        if "instance_types" in group:
            group["instance_types"] = tuple(group["instance_types"] or ())
        if "count" in group:
            group["count"] = int(group["count"] or 0)
        known = {f.name for f in fields(cls)}
        return cls(worker_groups={WORKERS: WorkerGroup(**group)}, **{k: v for k, v in values.items() if k in known})

    @property
    def workers(self) -> WorkerGroup:
        """The deployment's worker group, while each deployment has exactly one."""
        (group,) = self.worker_groups.values()
        return group
