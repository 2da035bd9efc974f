"""Aggregation of samples into CloudWatch statistic sets, per metric and dimensions."""

from __future__ import annotations

from monitoring.aggregate import Aggregator


def test_aggregator_keeps_min_max_sum_count_per_metric_and_dimensions():
    agg = Aggregator()
    for value in (10.0, 30.0, 20.0):
        agg.add("GPUUtilization", {"GpuIndex": "0", "ClusterName": "c"}, value)
    agg.add("GPUUtilization", {"ClusterName": "c", "GpuIndex": "1"}, 99.0)
    sets = agg.drain()
    assert len(sets) == 2 and len(agg) == 0
    stats = sets[("GPUUtilization", (("ClusterName", "c"), ("GpuIndex", "0")))]
    assert stats.as_cloudwatch() == {"SampleCount": 3.0, "Sum": 60.0, "Minimum": 10.0, "Maximum": 30.0}
