"""A run's training scalars as CloudWatch metrics, with the run's name, beside the GPU metrics.

On ECS the driver finds the namespace, cluster and region in its environment (RAYFLEET_METRICS_NAMESPACE,
RAYFLEET_CLUSTER_NAME, AWS_REGION: the task definitions set them) and rank 0 publishes each logged value.
The names, units and dimensions are those of monitoring/metrics.json's `training_metrics` (a test holds
the two together; the sidecar's package ships alone, so it is not imported here). The task role may put
metrics only into that namespace.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# scalar tag -> (CloudWatch metric, unit, factor)
METRICS = {
    "train/loss": ("TrainingLoss", "None", 1.0),
    "throughput/images_per_s": ("TrainingThroughput", "Count/Second", 1.0),
    "throughput/tokens_per_s": ("TrainingThroughput", "Count/Second", 1.0),
    "mfu": ("TrainingMFU", "Percent", 100.0),
}
DIMENSIONS = ("ClusterName", "RunName")


@dataclass(frozen=True)
class Destination:
    namespace: str
    cluster: str
    region: str | None

    @classmethod
    def from_environment(cls) -> Destination | None:
        namespace, cluster = os.environ.get("RAYFLEET_METRICS_NAMESPACE"), os.environ.get("RAYFLEET_CLUSTER_NAME")
        if not (namespace and cluster):
            return None
        return cls(namespace, cluster, os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"))


def metric_data(run_name: str, cluster: str, values: dict[str, float]) -> list[dict]:
    dimensions = [{"Name": "ClusterName", "Value": cluster}, {"Name": "RunName", "Value": run_name}]
    return [
        {"MetricName": name, "Dimensions": dimensions, "Value": float(values[tag]) * factor, "Unit": unit}
        for tag, (name, unit, factor) in METRICS.items()
        if values.get(tag) is not None
    ]


def publish(client, destination: Destination, run_name: str, values: dict[str, float]) -> None:
    data = metric_data(run_name, destination.cluster, values)
    if data:
        client.put_metric_data(Namespace=destination.namespace, MetricData=data)
