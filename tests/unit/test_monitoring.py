"""The sidecar's parts with an NVML stand-in: sampling, aggregation, batching, backoff, buffer, shutdown."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from monitoring import spec as metric_spec
from monitoring.__main__ import EXIT_NO_GPU, main
from monitoring.aggregate import Aggregator
from monitoring.identity import Identity, discover
from monitoring.nvml_sampler import NoGPU, NvmlSampler
from monitoring.publisher import Publisher, is_retryable
from monitoring.sidecar import Sidecar
from tests.fakes.fake_nvml import FakeNvml

SPEC = metric_spec.load()
IDENTITY = Identity("train-cluster", "i-0abc", "p5.48xlarge")


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


def throttled() -> ClientError:
    return ClientError({"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "PutMetricData")


def datum(i: int) -> dict:
    return {"MetricName": "GPUUtilization", "Dimensions": [{"Name": "GpuIndex", "Value": str(i)}], "Value": 1.0}


def test_sampler_reads_every_gpu_and_skips_unsupported_values():
    sampler = NvmlSampler(FakeNvml(gpus=2, no_ecc=(1,), throttled=(1,)))
    gpu0, gpu1 = sampler.sample()
    assert gpu0.values["GPUUtilization"] == 0.0 and gpu1.values["GPUUtilization"] == 20.0
    assert gpu0.values["GPUMemoryUsed"] == 1024 and gpu0.values["GPUMemoryTotal"] == 81559
    assert gpu0.values["GPUPowerDraw"] == 350 and gpu0.values["GPUPowerLimit"] == 700
    assert gpu0.values["GPUECCErrorsCorrected"] == 3 and gpu0.values["GPUECCErrorsUncorrected"] == 0
    assert "GPUECCErrorsCorrected" not in gpu1.values  # NotSupported: left out, not fatal
    assert gpu0.values["GPUThrottled"] == 0.0 and gpu1.values["GPUThrottled"] == 1.0  # idle is not throttling
    assert set(gpu0.values) <= {m.name for m in SPEC.metrics}


def test_no_library_or_no_gpu_is_a_clear_error(capsys):
    with pytest.raises(NoGPU, match="no NVIDIA driver"):
        NvmlSampler(FakeNvml(library=False))
    with pytest.raises(NoGPU, match="no GPUs"):
        NvmlSampler(FakeNvml(gpus=0))
    assert main([], nvml=FakeNvml(library=False)) == EXIT_NO_GPU
    assert "pass --idle-without-gpu" in capsys.readouterr().err


def test_once_prints_one_sample_as_json(capsys, monkeypatch):
    monkeypatch.delenv("ECS_CONTAINER_METADATA_URI_V4", raising=False)
    monkeypatch.setenv("RAYFLEET_CLUSTER_NAME", "c1")
    assert main(["--once"], nvml=FakeNvml(gpus=2)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["identity"]["cluster_name"] == "c1"
    assert [g["index"] for g in out["gpus"]] == [0, 1] and out["gpus"][1]["GPUUtilization"] == 20.0


def test_aggregator_keeps_min_max_sum_count_per_metric_and_dimensions():
    agg = Aggregator()
    for value in (10.0, 30.0, 20.0):
        agg.add("GPUUtilization", {"GpuIndex": "0", "ClusterName": "c"}, value)
    agg.add("GPUUtilization", {"ClusterName": "c", "GpuIndex": "1"}, 99.0)
    sets = agg.drain()
    assert len(sets) == 2 and len(agg) == 0
    stats = sets[("GPUUtilization", (("ClusterName", "c"), ("GpuIndex", "0")))]
    assert stats.as_cloudwatch() == {"SampleCount": 3.0, "Sum": 60.0, "Minimum": 10.0, "Maximum": 30.0}


def test_sidecar_builds_per_gpu_cluster_and_run_datums():
    client = RecordingClient()
    sidecar = Sidecar(NvmlSampler(FakeNvml(gpus=2)), Publisher(client, "rayfleet"),
                      Identity("c", "i-1", "g5.xlarge", run_name="run-7"), SPEC)  # fmt: skip
    for _ in range(3):
        sidecar.sample()
    sidecar.close_interval()
    assert sidecar.publisher.flush() > 0
    sent = [d for request in client.requests for d in request]
    by_key = {(d["MetricName"], tuple((x["Name"], x["Value"]) for x in d["Dimensions"])): d for d in sent}
    gpu0 = by_key[("GPUUtilization", (("ClusterName", "c"), ("GpuIndex", "0"), ("InstanceId", "i-1"),
                                      ("InstanceType", "g5.xlarge")))]  # fmt: skip
    assert gpu0["StatisticValues"] == {"SampleCount": 3.0, "Sum": 30.0, "Minimum": 0.0, "Maximum": 20.0}
    assert gpu0["Unit"] == "Percent" and gpu0["StorageResolution"] == 60
    cluster = by_key[("GPUUtilization", (("ClusterName", "c"),))]
    assert cluster["StatisticValues"]["SampleCount"] == 6.0 and cluster["StatisticValues"]["Maximum"] == 40.0
    assert ("GPUUtilization", (("ClusterName", "c"), ("RunName", "run-7"))) in by_key
    # Non-rollup metrics exist only per GPU.
    assert not [k for k in by_key if k[0] == "GPUTemperature" and len(k[1]) < 4]


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


def test_bounded_buffer_drops_oldest_and_reports_drops():
    client = RecordingClient()
    client.fail_with = EndpointConnectionError(endpoint_url="http://cloudwatch")
    sidecar = Sidecar(NvmlSampler(FakeNvml(gpus=1)), Publisher(client, "rayfleet", max_buffered=10), IDENTITY, SPEC)
    for _ in range(4):  # four intervals of 12 datums each into a buffer of 10
        sidecar.sample()
        sidecar.close_interval()
        sidecar.publisher.flush(force=True)
    assert len(sidecar.publisher.buffer) == 10 and sidecar.publisher.dropped > 0
    client.fail_with = None
    sidecar.publisher.flush(force=True)  # the first request that goes out reports every drop so far
    sent = [d for r in client.requests for d in r]
    drop_datums = [d for d in sent if d["MetricName"] == "SidecarDroppedSamples"]
    assert sum(d["Value"] for d in drop_datums) == sidecar.publisher.dropped == sidecar.publisher.dropped_reported
    assert drop_datums[0]["Dimensions"] == [{"Name": "ClusterName", "Value": "train-cluster"}]


def test_shutdown_flushes_the_open_interval():
    client = RecordingClient()
    sidecar = Sidecar(NvmlSampler(FakeNvml(gpus=1)), Publisher(client, "rayfleet"), IDENTITY, SPEC,
                      sample_interval=0.01, publish_interval=3600)  # fmt: skip
    stop = threading.Event()
    runner = threading.Thread(target=sidecar.run, args=(stop, 5.0))
    runner.start()
    threading.Event().wait(0.1)
    stop.set()  # what SIGTERM does
    runner.join(timeout=10)
    assert not runner.is_alive()
    sent = [d for r in client.requests for d in r]
    assert any(d["MetricName"] == "GPUUtilization" for d in sent)  # published although the hour never passed
    assert not sidecar.publisher.buffer


class _Metadata(BaseHTTPRequestHandler):
    def do_PUT(self):  # IMDSv2 token
        assert self.headers["X-aws-ec2-metadata-token-ttl-seconds"]
        self._send("token-123")

    def do_GET(self):
        if self.path == "/task":
            return self._send(json.dumps({"Cluster": "arn:aws:ecs:us-west-2:123456789012:cluster/rf-prod"}))
        assert self.headers["X-aws-ec2-metadata-token"] == "token-123"
        self._send(
            {"/latest/meta-data/instance-id": "i-0123", "/latest/meta-data/instance-type": "g6e.12xlarge"}[self.path]
        )

    def _send(self, body: str):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_identity_from_ecs_task_metadata_and_imdsv2():
    server = HTTPServer(("127.0.0.1", 0), _Metadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"
    try:
        found = discover(
            {"ECS_CONTAINER_METADATA_URI_V4": url, "RAYFLEET_IMDS_ENDPOINT": url, "RAYFLEET_RUN_NAME": "r1"}
        )
    finally:
        server.shutdown()
    assert found == Identity("rf-prod", "i-0123", "g6e.12xlarge", "r1")


def test_identity_off_ecs_asks_no_metadata_service():
    found = discover({"RAYFLEET_CLUSTER_NAME": "laptop"})
    assert found.cluster_name == "laptop" and found.instance_type == "unknown" and found.run_name is None
