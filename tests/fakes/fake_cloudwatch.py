"""A CloudWatch client stand-in for the sidecar and publisher tests."""

from __future__ import annotations


class RecordingClient:
    """Stands in for the CloudWatch client: records requests, fails on command."""

    def __init__(self):
        self.requests: list[list[dict]] = []
        self.fail_with: Exception | None = None

    def put_metric_data(self, Namespace, MetricData):
        assert Namespace == "rayfleet"
        if self.fail_with is not None:
            raise self.fail_with
        self.requests.append(list(MetricData))
