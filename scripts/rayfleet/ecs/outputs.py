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

from rayfleet.core import local_state
from rayfleet.core.aws import MissingOutputs


@dataclass(frozen=True)
class Outputs:
    region: str
    cluster_name: str
    private_subnet_ids: list[str]
    task_security_group_id: str
    trainer_task_definition: str
    head_service_name: str
    worker_service_name: str
    results_bucket: str
    trainer_log_group: str
    control_service_name: str = ""  # the snapshot and autostop (ray-control); "" before issue 27's deployments
    trainer_container_name: str = "trainer"
    trainer_log_stream_prefix: str = "trainer"
    head_container_name: str = "ray-head"
    worker_container_name: str = "ray-worker"
    ray_token_secret_arn: str = ""  # rayfleet token rotate needs it
    ecr_repository_urls: dict | None = None  # make push needs it
    worker_instance_type: str = ""  # make run checks a recipe's resources against it
    head_instance_type: str = ""  # make start checks the quotas for it
    worker_instance_types: tuple[str, ...] = ()  # with Spot types, all of them: the check uses the smallest
    worker_count: int = 0  # make start scales the worker service back to it
    concurrent_runs: int = 1  # runs whose drivers (trainer tasks) the head instance holds at once
    worker_lifecycle: str = "on-demand"  # or "spot": make run prices a run's workers from Spot price history
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
        for f in fields(cls):
            env = os.environ.get(f"RAYFLEET_{f.name.upper()}")
            if env:
                values[f.name] = env.split(",") if f.name in ("private_subnet_ids", "worker_instance_types") else env
        required = [f.name for f in fields(cls) if f.default is MISSING and f.name not in values]
        if required:
            where = str(path) if path.is_file() else f"{path} (missing)"
            raise MissingOutputs(f"Terraform outputs {', '.join(required)} not found in {where}; run `rayfleet deploy`")
        return cls(**{f.name: values[f.name] for f in fields(cls) if f.name in values})
