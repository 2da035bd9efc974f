"""The head's snapshot writer: Ray's view (nodes, resources, jobs) from the head's dashboard over HTTP with the
token, without joining the cluster; one failed round is one line, not the end of the loop."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

from rayfleet.node.control import head_snapshot
from tests.unit.node.http_stub import QuietHandler, serving

NODES = [
    {
        "node_id": "h" * 56,
        "node_ip": "10.0.0.1",
        "is_head_node": True,
        "state": "ALIVE",
        "resources_total": {"node:__internal_head__": 1.0, "node:10.0.0.1": 1.0, "memory": 4e9},
    },
    *[
        {
            "node_id": f"{i}" * 56,
            "node_ip": f"10.0.0.{i + 1}",
            "is_head_node": False,
            "state": "ALIVE",
            "resources_total": {"CPU": 4.0, "GPU": 1.0, "memory": 8e9, "object_store_memory": 1e9},
        }
        for i in (1, 2)
    ],
    {
        "node_id": "d" * 56,
        "node_ip": "10.0.0.9",
        "is_head_node": False,
        "state": "DEAD",
        "resources_total": {"CPU": 4.0},
    },
]
USAGE = {"CPU": [2.0, 8.0], "GPU": [2.0, 2.0], "memory": [0.0, 2e10], "objectStoreMemory": [5e8, 2e9]}
JOBS = [
    {
        "submission_id": "ddp-1",
        "job_id": "02000000",
        "type": "SUBMISSION",
        "status": "SUCCEEDED",
        "start_time": 1,
        "end_time": 9,
        "metadata": {"run": "ddp-1"},
        "entrypoint": "python -m x",
        "runtime_env": {"env_vars": {"K": "v"}},
    },
    {
        "submission_id": "ddp-2",
        "job_id": "03000000",
        "type": "SUBMISSION",
        "status": "RUNNING",
        "start_time": 5,
        "end_time": None,
        "metadata": {"rayfleet_run": "ddp-2"},
        "entrypoint": "python -m y",
    },
]


SERVE = {
    "applications": {
        "rayfleet": {
            "status": "RUNNING",
            "route_prefix": "/",
            "message": "",
            "deployments": {"model": {"status": "HEALTHY", "replicas": [{"state": "RUNNING"}, {"state": "RUNNING"}]}},
        }
    }
}


# Alive actors (the snapshot asks for those only): a run the hang watchdog holds hung has its marker among them.
# Each with the job Ray records as its maker: only the run's own job's marker holds it hung.
ACTORS = [
    {"name": "rayfleet-hung-ddp-2", "state": "ALIVE", "job_id": "03000000"},
    {"name": "rayfleet-hung-ddp-1", "state": "ALIVE", "job_id": "03000000"},  # another run's name: ignored
    {"name": "rayfleet-hung-x", "state": "ALIVE", "job_id": "02000000"},  # a finished job's: ignored
    {"name": "rayfleet-hung-../..", "state": "ALIVE", "job_id": "03000000"},  # no run name: dropped
    {"name": "", "state": "ALIVE", "job_id": "03000000"},
    {"name": "rayfleet-hang-watch-ddp-2", "job_id": "03000000"},
]


class Dashboard(QuietHandler):
    seen: ClassVar[list] = []

    def do_GET(self):
        Dashboard.seen.append((self.path, self.headers.get("Authorization")))
        if self.headers.get("Authorization") != "Bearer tok":
            self.send_response(401)
            self.end_headers()
            return
        path = self.path.split("?")[0]
        body = {
            "/api/v0/nodes": {"data": {"result": {"result": NODES}}},
            "/api/cluster_status": {"data": {"clusterStatus": {"loadMetricsReport": {"usage": USAGE}}}},
            "/api/jobs/": JOBS,
            "/api/v0/actors": {"data": {"result": {"result": ACTORS}}},
            "/api/serve/applications/": SERVE,
        }[path]
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def dashboard():
    Dashboard.seen = []
    with serving(Dashboard) as port:
        yield f"http://127.0.0.1:{port}"


def test_snapshot_reads_nodes_resources_and_jobs_over_http_with_the_token(dashboard):
    snap = head_snapshot.snapshot(dashboard, "tok")
    assert [(n["node_id"], n["alive"], n["head"]) for n in snap["nodes"]] == [
        ("h" * 12, True, True),
        ("1" * 12, True, False),
        ("2" * 12, True, False),
        ("d" * 12, False, False),
    ]
    assert snap["nodes"][0]["resources"] == {"memory": 4e9}  # node:<ip> entries left out
    assert snap["total"] == {"memory": 2e10, "CPU": 8.0, "GPU": 2.0, "object_store_memory": 2e9}  # alive nodes only
    assert snap["available"] == {"memory": 2e10, "CPU": 6.0, "GPU": 0.0, "object_store_memory": 1.5e9}
    assert [j["submission_id"] for j in snap["jobs"]] == ["ddp-2", "ddp-1"]  # newest first
    assert all("entrypoint" not in j and "runtime_env" not in j for j in snap["jobs"])  # no command lines, no env
    assert snap["hung_runs"] == ["ddp-2"]
    assert snap["hung_markers"] == [
        {"run": "ddp-1", "job_id": "03000000"},
        {"run": "ddp-2", "job_id": "03000000"},
        {"run": "x", "job_id": "02000000"},
    ]
    actors = next(path for path, _ in Dashboard.seen if path.startswith("/api/v0/actors"))
    assert "filter_keys=state&filter_predicates=%3D&filter_values=ALIVE" in actors
    assert snap["serve"] == [
        {
            "name": "rayfleet",
            "status": "RUNNING",
            "route_prefix": "/",
            "message": "",
            "deployments": [{"name": "model", "status": "HEALTHY", "replicas": {"RUNNING": 2}}],
        }
    ]
    assert {auth for _, auth in Dashboard.seen} == {"Bearer tok"}


def test_dashboard_and_token_come_from_the_task(tmp_path):
    env = {"RAYFLEET_RAY_PORTS": json.dumps({"dashboard": {"from": 8300, "to": 8300}}), "RAY_AUTH_TOKEN": "t\n"}
    assert head_snapshot.default_dashboard(env) == "http://127.0.0.1:8300"
    assert head_snapshot.default_dashboard({}) == "http://127.0.0.1:8265"
    assert head_snapshot.token(env) == "t"
    (tmp_path / "tok").write_text("from-file\n")
    (tmp_path / "tok").chmod(0o600)  # ray_auth reads only a private token file
    assert head_snapshot.token({"RAY_AUTH_TOKEN_PATH": str(tmp_path / "tok")}) == "from-file"


def test_a_failed_round_is_one_line_and_once_exits_1(monkeypatch, capsys):
    class S3:
        def put_object(self, **kwargs):
            raise AssertionError("nothing to write")

    class FakeAws:
        def client(self, name):
            return S3()

    monkeypatch.setattr("rayfleet.core.aws.Aws", FakeAws)
    code = head_snapshot.main(
        ["--bucket", "b", "--once", "--dashboard", "http://127.0.0.1:9"], env={"RAY_AUTH_TOKEN": "x"}
    )
    assert code == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "no snapshot this round" in line]
    assert len(lines) == 1 and "URLError" in lines[0]


class ServePut(QuietHandler):
    """The dashboard's Serve REST API, as far as restore_serve uses it: PUT records the config and the token."""

    put: ClassVar[list] = []

    def do_PUT(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ServePut.put.append((self.path, self.headers.get("Authorization"), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


KEPT_CONFIG = {"proxy_location": "HeadOnly", "applications": [{"name": "rayfleet", "args": {"run_name": "clf"}}]}


def test_a_head_that_lost_the_kept_application_gets_it_again_and_one_that_has_it_is_left_alone(capsys):
    """The control task's round: `make serve` kept a config (rayfleet/core/serve_kept.py); a head that runs none of
    its applications gets the same config PUT again, with the token; one that runs it (in any state), or whose
    Serve state is unknown, gets nothing; no kept config, nothing at all."""
    import boto3
    from botocore.exceptions import EndpointConnectionError
    from moto import mock_aws

    from rayfleet.core import serve_kept as kept

    ServePut.put = []
    with mock_aws(), serving(ServePut) as port:
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="rf-results")
        dashboard = f"http://127.0.0.1:{port}"
        assert head_snapshot.restore_serve(s3, "rf-results", dashboard, "tok", {"serve": []}) is None
        kept.keep(s3, "rf-results", "clf", KEPT_CONFIG)
        lost = head_snapshot.restore_serve(s3, "rf-results", dashboard, "tok", {"serve": []})
        assert lost == {"run": "clf", "applications": ["rayfleet"], "reapplied": ["rayfleet"]}
        assert ServePut.put == [("/api/serve/applications/", "Bearer tok", KEPT_CONFIG)]
        assert "applied run clf's kept config" in capsys.readouterr().out
        for serve in ([{"name": "rayfleet", "status": "DEPLOYING"}], [{"name": "?", "status": "unknown (x)"}]):
            assert head_snapshot.restore_serve(s3, "rf-results", dashboard, "tok", {"serve": serve})["reapplied"] == []
        assert len(ServePut.put) == 1
        kept.forget(s3, "rf-results")
        assert head_snapshot.restore_serve(s3, "rf-results", dashboard, "tok", {"serve": []}) is None

        class Away:  # S3 unreachable this round: said, never raised
            exceptions = s3.exceptions

            def get_object(self, **kwargs):
                raise EndpointConnectionError(endpoint_url="https://s3")

        failed = head_snapshot.restore_serve(Away(), "rf-results", dashboard, "tok", {"serve": []})
    assert failed["error"].startswith("EndpointConnectionError") and len(ServePut.put) == 1


def test_autostop_re_arms_when_the_queue_raised_the_workers():
    """The call site of the control task's round: the queue follower's `raised_from` re-arms autostop for that
    group (on the old code nothing did: a stopped autostop never stopped the raised workers again)."""
    from rayfleet.node.control.autostop import Autostop, GroupStop, Settings

    said: list[str] = []
    groups = {"ddp": GroupStop("rf-ddp"), "fsdp": GroupStop("rf-fsdp")}
    stopper = Autostop(Settings("rf", "rf-ray-head", groups), ecs=None, say=said.append)
    stopper.stopped = {"ddp": True, "fsdp": True}
    head_snapshot.follow_queue(stopper, {"ddp": {"wanted": 2, "desired": 2, "why": "x"}})  # not raised this round
    assert stopper.stopped == {"ddp": True, "fsdp": True}
    head_snapshot.follow_queue(stopper, {"ddp": {"wanted": 2, "desired": 2, "why": "x", "raised_from": 0}})
    assert stopper.stopped == {"ddp": False, "fsdp": True} and said == [
        "autostop: the queue raised ddp's workers from 0 to 2: ddp stops again after 30 idle minutes"
    ]
    head_snapshot.follow_queue(None, {"ddp": {"raised_from": 0}})  # autostop off: nothing to do
    head_snapshot.follow_queue(stopper, {"error": "ClientError: x"})


def test_suspects_are_judged_a_few_a_round_and_each_dead_node_once(monkeypatch):
    """A job can leave many dead nodes with suspect messages: the ECS look-ups are bounded per round, and a
    node judged (accepted or not) is not looked up again."""
    from rayfleet.node.control import suspect

    asked: list[str] = []

    def judged(address, named, cluster, services, aws):
        asked.append(address)
        return False, "not a worker of this deployment"

    monkeypatch.setattr(suspect, "worker_instance_at", judged)
    message = "Terminated due to preemption: node suspect on i-0{:015x}: hang"
    nodes = [
        {"node_id": f"n{i}", "alive": False, "address": f"10.0.0.{i}", "message": message.format(i)} for i in range(10)
    ]
    done: set[str] = set()
    first = head_snapshot.replace_suspects({"nodes": nodes}, "rf", None, done, ["rf-ray-worker"])
    assert len(first) == head_snapshot.MOST_SUSPECTS_PER_ROUND == len(asked)
    head_snapshot.replace_suspects({"nodes": nodes}, "rf", None, done, ["rf-ray-worker"])
    assert asked == [f"10.0.0.{i}" for i in range(8)]  # the next ones, never the same again


def test_the_queue_follower_judges_entries_by_this_rounds_jobs_and_the_operators_ceiling():
    """The control task passes each round's snapshot to the queue follower (an entry counts only while its run
    has an unfinished Ray job) and builds it with its own environment (RAYFLEET_MAX_PRIORITY, the operator's)."""
    group = {"service": "w", "vcpus": 4, "gpus": 1, "memory_mib": 16384, "min": 0, "max": 2, "idle_minutes": 30}
    env = {
        "RAYFLEET_WORKER_GROUPS": json.dumps({"ddp": group}),
        "RAYFLEET_CLUSTER_NAME": "c",
        "RAYFLEET_MAX_PRIORITY": "3",
    }
    follower = head_snapshot.queue_follower(env, "bucket", ecs=None)
    assert follower.queue.max_priority == 3 and list(follower.groups) == ["ddp"]
    assert follower.groups["ddp"].service == "w" and follower.groups["ddp"].max == 2


def test_each_round_gives_the_queue_follower_that_rounds_snapshot(monkeypatch):
    """The control task's loop hands the queue follower the snapshot it just took, so an entry of a run with no
    unfinished Ray job in it counts for nothing (rayfleet/core/run_queue_checks.py Alive)."""

    class S3:
        def put_object(self, **kwargs):
            self.body = kwargs["Body"]

    s3 = S3()

    class FakeAws:
        def client(self, name):
            return s3

    class Round:
        def tick(self, *args):
            self.args = args
            return {"wanted": None}

    follower = Round()
    taken = {"nodes": [], "jobs": [{"status": "RUNNING", "metadata": {"rayfleet_run": "a"}}]}
    monkeypatch.setattr("rayfleet.core.aws.Aws", FakeAws)
    monkeypatch.setattr(head_snapshot, "snapshot", lambda dashboard, auth: dict(taken))
    monkeypatch.setattr(head_snapshot, "restore_serve", lambda *a: {})
    monkeypatch.setattr(head_snapshot, "queue_follower", lambda env, bucket, ecs: follower)
    code = head_snapshot.main(
        ["--bucket", "b", "--once", "--dashboard", "http://127.0.0.1:9"], env={"RAY_AUTH_TOKEN": "x"}
    )
    assert code == 0 and follower.args[0]["jobs"] == taken["jobs"]
    assert json.loads(s3.body)["queue_capacity"] == {"wanted": None}
