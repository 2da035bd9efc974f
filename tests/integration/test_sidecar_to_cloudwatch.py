"""The sidecar against a real moto_server: published statistic sets read back intact, outages survived
within the buffer bound, a flush on SIGTERM, and a dashboard that shows exactly what is published."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest

from monitoring import dashboard
from monitoring import spec as metric_spec
from monitoring.identity import Identity
from monitoring.nvml_sampler import NvmlSampler
from monitoring.publisher import Publisher
from monitoring.sidecar import Sidecar
from rayfleet.train.tracking import cloudwatch
from tests.fakes.fake_nvml import FakeNvml
from tests.integration.helpers import REPO, Lines

pytestmark = pytest.mark.integration
SPEC = metric_spec.load()
IDENTITY = Identity("rf-test", "i-0123456789", "p5.48xlarge", run_name="run-42")


def sidecar_for(server, gpus=2, max_buffered=20_000, identity=IDENTITY) -> Sidecar:
    client = server.client_as("cloudwatch", "task")  # the sidecar runs in the task, as the task role (IAM enforced)
    publisher = Publisher(client, SPEC.namespace, max_buffered=max_buffered, backoff_base_s=0.01)
    return Sidecar(NvmlSampler(FakeNvml(gpus=gpus)), publisher, identity, SPEC)


def intervals_while_down(moto, sidecar: Sidecar, intervals: int, samples_per_interval: int = 1) -> None:
    """Stop the server, then run publish intervals against it: every flush fails and the data stays buffered."""
    moto.stop()
    for _ in range(intervals):
        for _ in range(samples_per_interval):
            sidecar.sample()
        sidecar.close_interval()
        assert sidecar.publisher.flush(force=True) == 0


def gpu_dims(index: int, identity: Identity = IDENTITY) -> list[dict]:
    values = {
        "ClusterName": identity.cluster_name,
        "InstanceId": identity.instance_id,
        "InstanceType": identity.instance_type,
        "GpuIndex": str(index),
    }
    return [{"Name": name, "Value": values[name]} for name in SPEC.gpu_dimensions]


def read_stats(cloudwatch, metric: str, dims: list[dict]) -> dict[str, float]:
    now = datetime.now(UTC)
    queries = [
        {
            "Id": stat.lower(),
            "MetricStat": {
                "Metric": {"Namespace": SPEC.namespace, "MetricName": metric, "Dimensions": dims},
                "Period": 3600,
                "Stat": stat,
            },
        }
        for stat in ("SampleCount", "Sum", "Minimum", "Maximum")
    ]
    result = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=now - timedelta(hours=1), EndTime=now + timedelta(hours=1)
    )
    return {
        r["Id"]: sum(r["Values"]) if r["Id"] in ("samplecount", "sum") else (r["Values"] or [None])[0]
        for r in result["MetricDataResults"]
    }


def test_published_statistic_sets_read_back_with_dimensions_intact(moto):
    sidecar = sidecar_for(moto)
    for _ in range(4):
        sidecar.sample()
    sidecar.close_interval()
    assert sidecar.publisher.flush() > 0 and not sidecar.publisher.buffer
    cloudwatch = moto.client("cloudwatch")
    # GPU 0 read 0, 10, 20, 30 %; GPU 1 read 20, 30, 40, 50 % (the stand-in's script).
    assert read_stats(cloudwatch, "GPUUtilization", gpu_dims(0)) == {
        "samplecount": 4.0,
        "sum": 60.0,
        "minimum": 0.0,
        "maximum": 30.0,
    }
    assert read_stats(cloudwatch, "GPUUtilization", gpu_dims(1))["sum"] == 140.0
    cluster = read_stats(cloudwatch, "GPUUtilization", [{"Name": "ClusterName", "Value": "rf-test"}])
    assert cluster["samplecount"] == 8.0 and cluster["maximum"] == 50.0
    assert read_stats(cloudwatch, "GPUMemoryTotal", gpu_dims(1))["maximum"] == 81559.0


def test_outage_loses_nothing_within_the_buffer_bound(moto):
    sidecar = sidecar_for(moto, gpus=1)
    intervals_while_down(moto, sidecar, intervals=3, samples_per_interval=2)
    buffered = len(sidecar.publisher.buffer)
    assert buffered > 0 and sidecar.publisher.failures == 3 and sidecar.publisher.dropped == 0
    moto.start()  # same port, empty store
    assert sidecar.publisher.flush(force=True) == buffered
    stats = read_stats(moto.client("cloudwatch"), "GPUUtilization", gpu_dims(0))
    assert stats["samplecount"] == 6.0 and stats["sum"] == sum(range(0, 60, 10))  # every sample arrived


def test_a_long_outage_drops_the_oldest_and_says_so(moto):
    sidecar = sidecar_for(moto, gpus=1, max_buffered=30)
    intervals_while_down(moto, sidecar, intervals=5)
    assert len(sidecar.publisher.buffer) == 30 and sidecar.publisher.dropped > 0
    moto.start()
    sidecar.publisher.flush(force=True)
    cloudwatch = moto.client("cloudwatch")
    dropped = read_stats(cloudwatch, "SidecarDroppedSamples", [{"Name": "ClusterName", "Value": "rf-test"}])
    assert dropped["sum"] == sidecar.publisher.dropped


# The sidecar's real entry point as a process, reading two fake GPUs. Each sample it takes is said on stderr
# with the runs it counted it for ({"sampled": ["run-a"]}), so a test waits for samples instead of sleeping.
SAMPLED = '{{"sampled": {}}}'
SIDECAR_RUNNER = (
    "import json, sys; from tests.fakes.fake_nvml import FakeNvml; from monitoring.__main__ import main; "
    "from monitoring.sidecar import Sidecar; sample = Sidecar.sample; "
    "Sidecar.sample = lambda self: (sample(self), print(json.dumps({'sampled': self.current}), file=sys.stderr, "
    "flush=True)); "
    "sys.exit(main(sys.argv[1:], nvml=FakeNvml(gpus=2)))"
)


def sidecar_process(env: dict, *args: str) -> tuple[subprocess.Popen, Lines, Lines]:
    """The sidecar as a process; its stdout (the log) and its stderr (the samples) read as they come."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SIDECAR_RUNNER, *args], env=env, cwd=REPO, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return proc, Lines(proc.stdout), Lines(proc.stderr)


def sidecar_process_env(moto, cluster: str, instance: str, **extra: str) -> dict:
    """A sidecar process's environment: moto's CloudWatch, the task role's credentials, its identity, not on ECS."""
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL_CLOUDWATCH": moto.url,
        **moto.as_identity("task"),  # the sidecar's container runs as the task role (IAM enforced)
        "AWS_DEFAULT_REGION": "us-east-1",
        "RAYFLEET_CLUSTER_NAME": cluster,
        "RAYFLEET_INSTANCE_ID": instance,
        "RAYFLEET_INSTANCE_TYPE": "g5.xlarge",
        "PYTHONPATH": str(REPO),
        **extra,
    }
    env.pop("ECS_CONTAINER_METADATA_URI_V4", None)
    return env


def test_sigterm_flushes_a_real_sidecar_process(moto):
    env = sidecar_process_env(moto, "rf-proc", "i-proc")
    proc, log, samples = sidecar_process(env, "--interval", "0.2", "--publish-interval", "3600")
    try:
        samples.wait_for(SAMPLED.format("[]"), timeout=60, count=3)
        proc.send_signal(signal.SIGTERM)
        # A deadline above the sidecar's own worst case for its last flush: 2 attempts of a 3 s connect and a
        # 10 s read (monitoring/__main__.py) with backoff, on a machine as loaded as CI's (30 s was not: seen once)
        assert proc.wait(timeout=90) == 0, samples.text()
        out, taken = log.text(), samples.text().count('"sampled"')
    finally:
        proc.kill()
    events = [json.loads(line) for line in out.strip().splitlines()]
    assert [e["event"] for e in events] == ["started", "stopped"]  # nothing published before the SIGTERM
    assert events[-1]["unsent"] == 0 and events[-1]["published"] > 0
    identity = Identity("rf-proc", "i-proc", "g5.xlarge")
    stats = read_stats(moto.client("cloudwatch"), "GPUUtilization", gpu_dims(1, identity))
    assert stats["samplecount"] == taken  # the hour-long interval, every sample of it, was flushed on SIGTERM


def test_dashboard_shows_exactly_what_the_sidecar_and_the_jobs_publish(moto):
    # Two intervals of 26 datums (2 GPUs) into a buffer of 40 while CloudWatch is away: the oldest 12 are
    # dropped, the newest interval survives whole, and the drop report goes out with it.
    sidecar = sidecar_for(moto, gpus=2, max_buffered=40)
    intervals_while_down(moto, sidecar, intervals=2)
    assert sidecar.publisher.dropped == 12
    moto.start()
    sidecar.publisher.flush(force=True)
    # The runs' training metrics come from each job's rank 0, not the sidecar (rayfleet/train/tracking/cloudwatch.py).
    training = cloudwatch.Destination(SPEC.namespace, "rayfleet-test", "us-east-1")
    values = {"train/loss": 2.0, "throughput/tokens_per_s": 900.0, "mfu": 0.4}
    cloudwatch.publish(moto.client("cloudwatch"), training, "run-1", values)
    listed = moto.client("cloudwatch").list_metrics(Namespace=SPEC.namespace)["Metrics"]
    published = {(m["MetricName"], tuple(sorted(d["Name"] for d in m["Dimensions"]))) for m in listed}
    shown = set()
    for expression in dashboard.expressions(dashboard.render(SPEC)):
        namespace, metric, dims = dashboard.parse_search(expression)
        assert namespace == SPEC.namespace
        shown.add((metric, dims))
    # Every dashboard line finds data, and every published (metric, dimensions) has a dashboard line.
    assert shown == published, f"only shown: {shown - published}; only published: {published - shown}"


def test_real_nvml_without_a_driver_exits_3_or_idles_until_sigterm(tmp_path):
    """This host has no NVIDIA driver: the real pynvml shows the no-GPU paths of the real CLI. Idling, not
    exiting (ECS would restart an exiting sidecar forever): it still follows the node's runs after it said it
    idles, and ends on SIGTERM."""
    from rayfleet.train import current_run

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    failed = subprocess.run([sys.executable, "-m", "monitoring"], env=env, cwd=REPO, capture_output=True, text=True)
    assert failed.returncode == 3
    assert "NVML is not available" in failed.stderr and "--idle-without-gpu" in failed.stderr
    idle = subprocess.Popen(
        [sys.executable, "-m", "monitoring", "--idle-without-gpu", "--run-dir", str(tmp_path), "--interval", "0.1"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    log = Lines(idle.stdout)
    try:
        log.wait_for('"no_gpu_idle"', timeout=60)
        with current_run.marked("run-idle", tmp_path):
            log.wait_for('"runs_changed"', timeout=60)
        assert idle.poll() is None
        idle.send_signal(signal.SIGTERM)
        assert idle.wait(timeout=10) == 0
    finally:
        idle.kill()
    events = [json.loads(line) for line in log.text().splitlines()]
    assert [(e["event"], e.get("runs")) for e in events] == [("no_gpu_idle", None), ("runs_changed", ["run-idle"])]


def test_a_long_lived_sidecar_follows_the_runs_on_its_node(moto, tmp_path):
    """The worker task's sidecar starts before any run and outlives them: the training side's current-run
    files (rayfleet/train/current_run.py, the writer Ray Train workers use) give each sample its run, and the
    per-run rollup reaches CloudWatch under each run's name in turn."""
    from rayfleet.train import current_run

    env = sidecar_process_env(moto, "rf-runs", "i-runs", RAYFLEET_CURRENT_RUN_DIR=str(tmp_path))  # as the task sets it
    env.pop("RAYFLEET_RUN_NAME", None)
    proc, log, samples = sidecar_process(env, "--interval", "0.1", "--publish-interval", "0.3")
    try:
        idle = SAMPLED.format("[]")
        samples.wait_for(idle, timeout=60)  # an idle node: samples, for no run
        for run in ("run-a", "run-b"):
            with current_run.marked(run, tmp_path):
                samples.wait_for(SAMPLED.format(json.dumps([run])), timeout=60, count=2)
            samples.wait_for(idle, timeout=60, count=samples.count(idle) + 1)  # the run is over
        proc.send_signal(signal.SIGTERM)
        # A deadline above the sidecar's own worst case for its last flush: 2 attempts of a 3 s connect and a
        # 10 s read (monitoring/__main__.py) with backoff, on a machine as loaded as CI's (30 s was not: seen once)
        assert proc.wait(timeout=90) == 0, samples.text()
        out, taken = log.text(), samples.text()
    finally:
        proc.kill()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [e["runs"] for e in events if e["event"] == "runs_changed"] == [["run-a"], [], ["run-b"], []]
    cloudwatch = moto.client("cloudwatch")
    for run in ("run-a", "run-b"):
        dims = [{"Name": "ClusterName", "Value": "rf-runs"}, {"Name": "RunName", "Value": run}]
        stats = read_stats(cloudwatch, "GPUUtilization", dims)
        assert stats["samplecount"] == 2 * taken.count(SAMPLED.format(json.dumps([run]))), (run, stats)  # 2 GPUs
    listed = cloudwatch.list_metrics(Namespace=SPEC.namespace, MetricName="GPUUtilization")["Metrics"]
    runs = {d["Value"] for m in listed for d in m["Dimensions"] if d["Name"] == "RunName"}
    assert runs == {"run-a", "run-b"}
