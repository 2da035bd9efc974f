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

LEGACY = worker_groups.DEFAULT  # the group the flat worker_* outputs of earlier deployments describe
SPOT_POLICIES = ("on-demand", "spot-preferred", "spot-only")  # infra/variables.tf worker_groups.spot
MODELS_FROM = ("image", "s3")  # infra/variables.tf worker_groups.models_from


@dataclass(frozen=True)
class WorkerGroup:
    """One worker group as Terraform's `worker_groups` output describes it: its ECS service and container, its Auto
    Scaling group and capacity provider, its instance types (the first preferred), its min and max nodes, its Spot
    policy, EFA, GPUs per node, autostop minutes and whether it runs the image with the preloaded models."""

    service_name: str
    container_name: str = "ray-worker"
    autoscaling_group: str = ""
    capacity_provider: str = ""
    instance_types: tuple[str, ...] = ()  # rayfleet run checks a recipe's resources against the smallest
    min_nodes: int = 0  # autostop leaves the group here; rayfleet deploy start brings it back to it
    max_nodes: int = 0  # the most nodes a run (or rayfleet deploy start --group) gets
    spot: str = "on-demand"  # SPOT_POLICIES
    on_demand_base: int = 0  # on Spot, this many nodes stay on demand
    efa: bool = False
    gpus: int = 0
    idle_minutes: float = 0
    models: bool = False  # its workers load the preloaded models from their own node
    models_from: str = "image"  # MODELS_FROM: the ray-worker image tagged <tag>-models, or the S3 model cache

    def __post_init__(self):
        object.__setattr__(self, "instance_types", tuple(self.instance_types or ()))
        if self.models_from not in MODELS_FROM:
            raise MissingOutputs(
                f"worker group {self.service_name}: models_from {self.models_from!r} is none of {MODELS_FROM}"
            )
        if self.spot not in SPOT_POLICIES:
            raise MissingOutputs(f"worker group {self.service_name}: spot {self.spot!r} is none of {SPOT_POLICIES}")

    @property
    def types(self) -> tuple[str, ...]:
        return self.instance_types

    @property
    def instance_type(self) -> str:
        return self.instance_types[0] if self.instance_types else ""

    @property
    def lifecycle(self) -> str:
        """How a run on the group is priced: "spot" (Spot price history) or "on-demand"."""
        return "on-demand" if self.spot == "on-demand" else "spot"


# The flat Terraform outputs of earlier deployments' one group, by WorkerGroup field.
FLAT_OUTPUTS = {
    "service_name": "worker_service_name",
    "container_name": "worker_container_name",
    "instance_types": "worker_instance_types",
    "max_nodes": "worker_count",
}


def _group(name: str, fields_: dict) -> WorkerGroup:
    known = {f.name for f in fields(WorkerGroup)}
    try:
        return WorkerGroup(**{k: v for k, v in fields_.items() if k in known})
    except TypeError as exc:
        raise MissingOutputs(f"worker_groups.{name} lacks {exc}; run `rayfleet deploy`") from None


@dataclass(frozen=True)
class Outputs:
    region: str
    cluster_name: str
    private_subnet_ids: list[str]
    task_security_group_id: str
    trainer_task_definition: str
    head_service_name: str
    worker_groups: dict[str, WorkerGroup]  # by name (Terraform's worker_groups output)
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
        names = [f.name for f in fields(cls) if f.name != "worker_groups"] + list(FLAT_OUTPUTS.values())
        names += ["worker_instance_type", "worker_lifecycle"]
        for name in names:
            env = os.environ.get(f"RAYFLEET_{name.upper()}")
            if env:
                values[name] = env.split(",") if name in ("private_subnet_ids", "worker_instance_types") else env
        required = [f.name for f in fields(cls) if f.default is MISSING and f.name not in values]
        if "worker_groups" in required and FLAT_OUTPUTS["service_name"] in values:
            required.remove("worker_groups")  # an earlier deployment's one group (from_flat)
        if required:
            where = str(path) if path.is_file() else f"{path} (missing)"
            raise MissingOutputs(f"Terraform outputs {', '.join(required)} not found in {where}; run `rayfleet deploy`")
        return cls.from_flat(**values)

    @classmethod
    def from_flat(cls, **values) -> Outputs:
        """From Terraform's outputs (unknown names ignored): `worker_groups`, or an earlier deployment's flat
        worker_* outputs as its one group, named default."""
        flat = {field: values.pop(output) for field, output in FLAT_OUTPUTS.items() if output in values}
        single, lifecycle = values.pop("worker_instance_type", None), values.pop("worker_lifecycle", None)
        groups = values.pop("worker_groups", None)
        if groups is None:
            flat["instance_types"] = tuple(flat.get("instance_types") or ([single] if single else []))
            flat["max_nodes"] = flat["min_nodes"] = int(flat.get("max_nodes") or 0)
            flat["spot"] = "spot-only" if lifecycle == "spot" else "on-demand"
            groups = {LEGACY: flat}
        if not isinstance(groups, dict) or not groups:
            raise MissingOutputs("Terraform output worker_groups is not a map of groups; run `rayfleet deploy`")
        known = {f.name for f in fields(cls)}
        return cls(
            worker_groups={worker_groups.check_name(n): _group(n, g) for n, g in sorted(groups.items())},
            **{k: v for k, v in values.items() if k in known},
        )

    def group(self, name: str | None) -> WorkerGroup:
        """The named group (MissingOutputs naming the groups there are); None: the only group, when there is one."""
        if name is None and len(self.worker_groups) == 1:
            return next(iter(self.worker_groups.values()))
        if name not in self.worker_groups:
            raise MissingOutputs(
                f"this deployment has no worker group {name!r}; its groups: {', '.join(self.worker_groups)}"
            )
        return self.worker_groups[name]

    @property
    def worker_service_names(self) -> list[str]:
        return [g.service_name for g in self.worker_groups.values()]
