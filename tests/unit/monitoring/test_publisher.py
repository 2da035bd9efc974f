"""The CloudWatch publisher: request batches, backoff with jitter, errors never retried."""

from __future__ import annotations

from botocore.exceptions import ClientError, EndpointConnectionError

from monitoring.publisher import Publisher, is_retryable
from tests.fakes.fake_cloudwatch import RecordingClient


def throttled() -> ClientError:
    return ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "PutMetricData")


def datum(i: int) -> dict:
    return {"MetricName": "GPUUtilization", "Dimensions": [{"Name": "GpuIndex", "Value": str(i)}], "Value": 1.0}


def test_batches_respect_the_request_limit():
    client = RecordingClient()
    publisher = Publisher(client, "rayfleet", max_per_request=7)
    publisher.enqueue([datum(i) for i in range(20)])
    assert publisher.flush() == 20
    assert [len(r) for r in client.requests] == [7, 7, 6]
    order = [d["Dimensions"][0]["Value"] for r in client.requests for d in r]
    assert order == [str(i) for i in range(20)]  # oldest first


def test_throttling_keeps_data_and_backs_off_with_jitter():
    client, now = RecordingClient(), [100.0]
    publisher = Publisher(
        client, "rayfleet", backoff_base_s=1, backoff_cap_s=8, clock=lambda: now[0], jitter=lambda: 1.0
    )
    publisher.enqueue([datum(i) for i in range(3)])
    client.fail_with = throttled()
    delays = []
    for _ in range(5):
        assert publisher.flush(force=True) == 0
        delays.append(publisher.next_attempt - now[0])
    assert delays == [1, 2, 4, 8, 8]  # exponential, capped (jitter pinned to its maximum here)
    assert len(publisher.buffer) == 3 and publisher.dropped == 0
    client.fail_with = None
    assert publisher.flush() == 0  # still inside the backoff window
    now[0] += 8
    assert publisher.flush() == 3 and publisher.failures == 0


def test_full_jitter_spreads_delays():
    publisher = Publisher(RecordingClient(), "rayfleet", backoff_base_s=2, backoff_cap_s=60, jitter=lambda: 0.25)
    publisher.failures = 4
    assert publisher.backoff_delay() == 0.25 * 16


def test_errors_cloudwatch_will_never_accept_are_dropped_not_retried():
    client = RecordingClient()
    client.fail_with = ClientError({"Error": {"Code": "InvalidParameterValue", "Message": "bad"}}, "PutMetricData")
    publisher = Publisher(client, "rayfleet")
    publisher.enqueue([datum(1)])
    publisher.flush()
    assert not publisher.buffer and publisher.dropped == 1 and publisher.failures == 0
    assert is_retryable(throttled()) and is_retryable(EndpointConnectionError(endpoint_url="http://x"))
