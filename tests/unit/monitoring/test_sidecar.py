"""The sidecar with an NVML stand-in and a recording CloudWatch client: datums per GPU, cluster and run,
the bounded buffer, the flush on shutdown."""

from __future__ import annotations

import threading

from botocore.exceptions import EndpointConnectionError

from monitoring import spec as metric_spec
from monitoring.identity import Identity
from monitoring.nvml_sampler import NvmlSampler
from monitoring.publisher import Publisher
from monitoring.sidecar import Sidecar
from tests.fakes.fake_cloudwatch import RecordingClient
from tests.fakes.fake_nvml import FakeNvml

SPEC = metric_spec.load()
IDENTITY = Identity("train-cluster", "i-0abc", "p5.48xlarge")


def test_sidecar_builds_per_gpu_cluster_and_run_datums():
    client = RecordingClient()
    sidecar = Sidecar(
        NvmlSampler(FakeNvml(gpus=2)),
        Publisher(client, "rayfleet"),
        Identity("c", "i-1", "g5.xlarge", run_name="run-7"),
        SPEC,
    )
    for _ in range(3):
        sidecar.sample()
    sidecar.close_interval()
    assert sidecar.publisher.flush() > 0
    sent = [d for request in client.requests for d in request]
    by_key = {(d["MetricName"], tuple((x["Name"], x["Value"]) for x in d["Dimensions"])): d for d in sent}
    gpu0 = by_key[
        (
            "GPUUtilization",
            (("ClusterName", "c"), ("GpuIndex", "0"), ("InstanceId", "i-1"), ("InstanceType", "g5.xlarge")),
        )
    ]
    assert gpu0["StatisticValues"] == {"SampleCount": 3.0, "Sum": 30.0, "Minimum": 0.0, "Maximum": 20.0}
    assert gpu0["Unit"] == "Percent" and gpu0["StorageResolution"] == 60
    cluster = by_key[("GPUUtilization", (("ClusterName", "c"),))]
    assert cluster["StatisticValues"]["SampleCount"] == 6.0 and cluster["StatisticValues"]["Maximum"] == 40.0
    assert ("GPUUtilization", (("ClusterName", "c"), ("RunName", "run-7"))) in by_key
    # Non-rollup metrics exist only per GPU.
    assert not [k for k in by_key if k[0] == "GPUTemperature" and len(k[1]) < 4]


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
    sidecar = Sidecar(
        NvmlSampler(FakeNvml(gpus=1)),
        Publisher(client, "rayfleet"),
        IDENTITY,
        SPEC,
        sample_interval=0.01,
        publish_interval=3600,
    )
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


def _run_dims(client) -> list[tuple]:
    """The RunName of every rollup datum sent, in order of the requests."""
    sent = [d for r in client.requests for d in r]
    return sorted(
        {
            dict((x["Name"], x["Value"]) for x in d["Dimensions"])["RunName"]
            for d in sent
            if any(x["Name"] == "RunName" for x in d["Dimensions"])
        }
    )


def test_sidecar_follows_the_run_using_its_gpus():
    """A long-lived sidecar learns the run from the node (the current-run files) at every sample: the RunName
    rollup appears when a run starts, changes with the run, and disappears when the node is idle."""
    now: list[str] = []
    client = RecordingClient()
    sidecar = Sidecar(
        NvmlSampler(FakeNvml(gpus=2)), Publisher(client, "rayfleet"), IDENTITY, SPEC, runs=lambda: list(now)
    )
    seen = []
    for runs in ([], ["ddp-1"], ["ddp-1"], ["fsdp-2"], []):
        now[:] = runs
        client.requests.clear()
        sidecar.sample()
        sidecar.close_interval()
        sidecar.publisher.flush(force=True)
        seen.append(_run_dims(client))
        sent = [d for r in client.requests for d in r]
        cluster = [d for d in sent if d["Dimensions"] == [{"Name": "ClusterName", "Value": "train-cluster"}]]
        assert cluster  # the cluster rollup is there whatever the run
    assert seen == [[], ["ddp-1"], ["ddp-1"], ["fsdp-2"], []]
    for d in [d for r in client.requests for d in r]:
        assert "RunName" not in [x["Name"] for x in d["Dimensions"]]


def test_run_rollup_carries_the_gpus_samples(monkeypatch):
    client = RecordingClient()
    sidecar = Sidecar(
        NvmlSampler(FakeNvml(gpus=2)), Publisher(client, "rayfleet"), IDENTITY, SPEC, runs=lambda: ["ddp-1"]
    )
    sidecar.sample()
    sidecar.close_interval()
    sidecar.publisher.flush(force=True)
    sent = [d for r in client.requests for d in r]
    run = [
        d
        for d in sent
        if d["MetricName"] == "GPUUtilization"
        and d["Dimensions"]
        == [{"Name": "ClusterName", "Value": "train-cluster"}, {"Name": "RunName", "Value": "ddp-1"}]
    ]
    assert len(run) == 1 and run[0]["StatisticValues"]["SampleCount"] == 2.0  # both GPUs of the node


def watching(nvml: FakeNvml, health_dir) -> Sidecar:
    publisher = Publisher(RecordingClient(), "rayfleet")
    return Sidecar(NvmlSampler(nvml), publisher, IDENTITY, SPEC, health_dir=str(health_dir))


def test_an_uncorrectable_ecc_error_or_a_lost_gpu_marks_the_node_suspect_once(tmp_path, capsys):
    """The stand-in sampler reports GPU 1 with 2 uncorrectable ECC errors and GPU 2 lost (every NVML call fails
    with "GPU is lost"): the sidecar writes the suspect file the worker's entry point reads
    (rayfleet/node/control/suspect.py, the same format), once, keeps sampling the healthy GPU, and says so in its
    log."""
    import json

    from rayfleet.node.control import suspect

    nvml = FakeNvml(gpus=3, uncorrectable={1: 2}, lost=(2,))
    sidecar = watching(nvml, tmp_path)
    sidecar.sample()
    expected = ["GPU 1 (Fake H100): 2 uncorrectable ECC error(s)", "GPU 2 fell off the bus (NVML: GPU is lost)"]
    found = suspect.read(tmp_path)
    assert found["reasons"] == expected and suspect.reason(found).startswith("node suspect: GPU 1 (Fake H100)")
    written = (tmp_path / "suspect.json").stat().st_mtime_ns
    sidecar.sample()
    assert (tmp_path / "suspect.json").stat().st_mtime_ns == written  # once
    logged = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [e["reasons"] for e in logged if e.get("event") == "node_suspect"] == [expected]
    assert [p.name for p in tmp_path.iterdir()] == ["suspect.json"]  # no partial file left
    sidecar.close_interval()
    per_gpu = [d for d in sidecar.publisher.buffer if len(d["Dimensions"]) == 4]
    metrics = {(d["MetricName"], d["Dimensions"][1]["Value"]) for d in per_gpu}
    assert ("GPUUtilization", "0") in metrics and not [m for m in metrics if m[1] == "2"]  # the lost GPU: no values


def test_healthy_gpus_write_nothing(tmp_path):
    sidecar = watching(FakeNvml(gpus=2), tmp_path)
    sidecar.sample()
    assert list(tmp_path.iterdir()) == [] and not sidecar.suspect
