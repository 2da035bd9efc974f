import json
from pathlib import Path

from rayfleet.train.tracking import cloudwatch

SPEC = Path(__file__).resolve().parents[4] / "monitoring" / "metrics.json"


def test_the_published_names_units_and_dimensions_are_the_specs():
    spec = json.loads(SPEC.read_text())
    assert {(name, unit) for name, unit, _ in cloudwatch.METRICS.values()} == {
        (m["name"], m["unit"]) for m in spec["training_metrics"]
    }
    assert list(cloudwatch.DIMENSIONS) == spec["run_dimensions"]


def test_a_logged_step_becomes_metric_data_with_the_run_and_cluster():
    values = {"train/loss": 2.5, "throughput/tokens_per_s": 1000.0, "mfu": 0.42, "lr": 0.1, "grad_norm": None}
    data = cloudwatch.metric_data("fsdp-1", "prod", values)
    dims = [{"Name": "ClusterName", "Value": "prod"}, {"Name": "RunName", "Value": "fsdp-1"}]
    assert data == [
        {"MetricName": "TrainingLoss", "Dimensions": dims, "Value": 2.5, "Unit": "None"},
        {"MetricName": "TrainingThroughput", "Dimensions": dims, "Value": 1000.0, "Unit": "Count/Second"},
        {"MetricName": "TrainingMFU", "Dimensions": dims, "Value": 42.0, "Unit": "Percent"},
    ]
    assert cloudwatch.metric_data("r", "c", {"train/step_loss": 1.0}) == []  # nothing of the spec: no call


def test_the_destination_comes_from_the_trainers_environment_or_is_off(monkeypatch):
    for name in ("RAYFLEET_METRICS_NAMESPACE", "RAYFLEET_CLUSTER_NAME", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    assert cloudwatch.Destination.from_environment() is None  # a laptop: no CloudWatch
    monkeypatch.setenv("RAYFLEET_METRICS_NAMESPACE", "rayfleet")
    assert cloudwatch.Destination.from_environment() is None
    monkeypatch.setenv("RAYFLEET_CLUSTER_NAME", "prod")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert cloudwatch.Destination.from_environment() == cloudwatch.Destination("rayfleet", "prod", "eu-west-1")
