"""The local cluster's shape: its workers, their CPUs and GPUs, its ports, and its worker groups
(rayfleet/core/worker_groups.py), as `rayfleet cluster up` takes them and the cluster's record keeps them."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from rayfleet.core import worker_groups
from rayfleet.core.errors import ConfigError
from rayfleet.local.host import ClusterError

DEFAULT_OBJECT_STORE_BYTES = 256 * 1024**2


@dataclass
class ClusterSpec:
    workers: int = 2
    cpus_per_worker: float = 1.0
    gpus_per_worker: int = 0
    port: int = 6390
    dashboard_port: int = 8265
    object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES
    gcs_store: bool = False  # the GCS on a local redis-server: a killed head can be replaced (gcs_store.py)
    # worker groups, [name, nodes, logical GPUs per node] each (`--group NAME=NODES[xGPUS]`): labelled nodes,
    # in this order (rayfleet/core/worker_groups.py); none: one group `default` of `workers` nodes
    groups: list[list] = field(default_factory=list)

    @classmethod
    def from_env(cls, **overrides) -> ClusterSpec:
        spec = cls(
            port=int(os.environ.get("RAYFLEET_RAY_PORT", 6390)),
            dashboard_port=int(os.environ.get("RAYFLEET_DASHBOARD_PORT", 8265)),
            gcs_store=os.environ.get("RAYFLEET_GCS_STORE", "") not in ("", "0"),
        )
        for key, value in overrides.items():
            if value is not None:
                setattr(spec, key, value)
        if spec.groups:  # the groups say how many nodes there are
            spec.groups = [list(g) for g in spec.groups]
            spec.workers = sum(nodes for _, nodes, _ in spec.groups)
        spec.validate()
        return spec

    def listed_groups(self) -> list[list]:
        """[name, nodes, GPUs per node] per group; without groups, the one group `default`."""
        return self.groups or [[worker_groups.DEFAULT, self.workers, self.gpus_per_worker]]

    def node_groups(self) -> list[tuple[str, int]]:
        """Per worker node, in order: its group and its logical GPUs."""
        return [(name, gpus) for name, nodes, gpus in self.listed_groups() for _ in range(nodes)]

    def group_summary(self) -> dict[str, str]:
        """name -> its nodes, as a refusal lists them: "2 node(s) x 1 CPU + 4 GPU"."""
        return {
            name: f"{nodes} node(s) x {self.cpus_per_worker:g} CPU" + (f" + {gpus} GPU" if gpus else "")
            for name, nodes, gpus in self.listed_groups()
        }

    def validate(self) -> None:
        names = [g[0] for g in self.groups]
        if len(set(names)) != len(names):
            raise ClusterError(f"each worker group once: {', '.join(names)}")
        for name, nodes, gpus in self.groups:
            try:
                worker_groups.check_name(name)
            except ConfigError as exc:
                raise ClusterError(str(exc)) from None
            if nodes < 1 or gpus < 0:
                raise ClusterError(f"worker group {name}: at least 1 node and no negative GPUs, got {nodes}x{gpus}")
        if self.workers < 1:
            raise ClusterError(f"workers must be at least 1, got {self.workers}")
        if self.cpus_per_worker <= 0:
            raise ClusterError(f"cpus_per_worker must be positive, got {self.cpus_per_worker}")
        if not 1024 <= self.port <= 9000:
            raise ClusterError(f"RAYFLEET_RAY_PORT must be in 1024..9000, got {self.port}")
        if self.workers > 50:
            raise ClusterError(f"at most 50 local workers, got {self.workers}")
