"""`rayfleet status`: GPU counts from the ECS agent or the catalog, and the report of an empty cluster."""

from __future__ import annotations

from rayfleet.core.catalog import gpus_of
from rayfleet.ops.status.gather import registered_gpus
from rayfleet.ops.status.render import autostop_line, kept_line, render, render_ray


def test_gpus_from_the_ecs_agent_or_the_catalog():
    gpu = {"name": "GPU", "type": "STRINGSET", "stringSetValue": ["GPU-a", "GPU-b"]}
    real_ecs = {"registeredResources": [{"name": "CPU", "type": "INTEGER", "integerValue": 4096}, gpu]}
    assert registered_gpus(real_ecs) == 2
    assert registered_gpus({"registeredResources": [{"name": "CPU", "type": "INTEGER"}]}) is None
    assert gpus_of("p5.48xlarge") == 8 and gpus_of("x9.huge") is None


def empty_status() -> dict:
    """What `status` gathers from a deployment with nothing running and no snapshot."""
    return {
        "cluster": "c",
        "region": "r",
        "services": [],
        "instances": [],
        "tasks": [],
        "ray": None,
        "runs": [],
        "cost_per_hour_usd": 0.0,
        "cost_unknown_types": [],
        "prices_as_of": "x",
    }


def test_status_renders_an_empty_cluster():
    text = render(empty_status())
    assert "(none running)" in text and "no snapshot" in text and "$0.00/hour for 0 instance(s)" in text


def test_last_checkpoint_ignores_rays_snapshot_file(tmp_path):
    from rayfleet.core.run_dir import RunDir
    from rayfleet.ops.status.gather import last_checkpoint

    run_dir = RunDir(str(tmp_path), "r")
    for name in ("checkpoint_000002/state.pt", "checkpoint_000010/state.pt", "checkpoint_manager_snapshot.json"):
        run_dir.write(name, "x")
    assert last_checkpoint(run_dir) == "checkpoint_000010"


def test_status_renders_rays_view_nodes_resources_and_jobs():
    ray = {
        "taken_at": "2026-11-23T12:00:00+00:00",
        "nodes": [
            {"node_id": "a" * 12, "alive": True, "head": True, "address": "10.0.0.1", "resources": {}},
            {
                "node_id": "b" * 12,
                "alive": True,
                "head": False,
                "address": "10.0.0.2",
                "resources": {"CPU": 4.0, "GPU": 1.0},
            },
            {"node_id": "c" * 12, "alive": False, "head": False, "address": "10.0.0.3", "resources": {"CPU": 4.0}},
        ],
        "total": {"CPU": 4.0, "GPU": 1.0, "memory": 8e9},
        "available": {"CPU": 3.0, "GPU": 0.0, "memory": 8e9},
        "jobs": [
            {
                "submission_id": "ddp-1",
                "job_id": "02000000",
                "type": "SUBMISSION",
                "status": "RUNNING",
                "start_time": 1795435200000,
                "end_time": None,
                "metadata": {},
            }
        ],
        "serve": [
            {
                "name": "rayfleet",
                "status": "RUNNING",
                "route_prefix": "/",
                "message": "",
                "deployments": [{"name": "model", "status": "HEALTHY", "replicas": {"RUNNING": 2}}],
            }
        ],
    }
    text = render(
        {
            "cluster": "c",
            "region": "r",
            "services": [],
            "instances": [],
            "tasks": [],
            "ray": ray,
            "runs": [],
            "cost_per_hour_usd": 0.0,
            "cost_unknown_types": [],
            "prices_as_of": "x",
        }
    )
    assert "ray (as the head reports it, 2026-11-23T12:00:00+00:00)" in text
    assert "2 nodes alive (1 head, 1 worker), 1 dead; CPU 3/4 free, GPU 0/1 free, memory 7.5/7.5 GiB free" in text
    assert "10.0.0.2" in text and "CPU 4, GPU 1" in text
    assert "ddp-1" in text and "RUNNING" in text
    assert "  serve: rayfleet  RUNNING  route /\n      model: HEALTHY (2 RUNNING)" in text
    assert "serve kept" not in text
    kept = {"run": "clf", "applications": ["rayfleet"], "reapplied": ["rayfleet"]}
    shown = "run clf (a restarted head gets it back; rayfleet serve down ends it); applied again to this head: rayfleet"
    assert f"  serve kept: {shown}" in render_ray({**ray, "serve_kept": kept})
    assert kept_line({"error": "ClientError: x"}) == "unreadable (ClientError: x)"


def test_the_autostop_line_says_when_the_workers_stop():
    idle = {
        "idle_since": "2026-11-23T12:00:00+00:00",
        "stops_at": "2026-11-23T12:30:00+00:00",
        "stops": ["rf-ray-worker-ddp"],
        "stopped": False,
    }
    done = {**idle, "stops": ["rf-ray-head", "rf-ray-control"], "stopped": True}
    decided = {"idle_min": 30, "groups": {"ddp": idle, "head": done}}
    assert autostop_line(decided) == (
        "ddp: rf-ray-worker-ddp stop at 2026-11-23T12:30:00+00:00 unless a run needs them (idle since"
        " 2026-11-23T12:00:00+00:00); head: rf-ray-head and rf-ray-control stopped at 2026-11-23T12:30:00+00:00"
        " (idle since 2026-11-23T12:00:00+00:00); `rayfleet deploy start`"
    )
    in_use = {"idle_min": 30, "busy": "1 Ray job(s) running", "groups": {"ddp": {"busy": True}, "fsdp": idle}}
    assert autostop_line(in_use).startswith("not idle (1 Ray job(s) running); ddp: in use; fsdp: rf-ray-worker-ddp")
    assert autostop_line({"idle_min": 30, "busy": "serving chat"}) == (
        "not idle (serving chat); each group stops after its idle minutes"
    )
    assert autostop_line(None) == "off"
    assert autostop_line({"error": "AccessDeniedException: no"}) == "cannot decide (AccessDeniedException: no)"
    shown = render_ray({"nodes": [], "total": {}, "available": {}, "jobs": [], "autostop": decided})
    assert "  autostop: ddp: rf-ray-worker-ddp stop at 2026-11-23T12:30:00+00:00 unless" in "\n".join(shown)
    raised = {"wanted": 2, "desired": 2, "why": "second waits for 1 node(s) beside 1 running run(s)", "raised_from": 0}
    capacity = {"ddp": raised, "fsdp": {"wanted": None}}
    shown = "\n".join(render_ray({"nodes": [], "total": {}, "available": {}, "jobs": [], "queue_capacity": capacity}))
    assert "  queue: ddp needs 2 node(s): second waits for 1 node(s) beside 1 running run(s)" in shown
    assert "(its service wants 2, raised from 0)" in shown and "fsdp" not in shown
    quiet = render_ray(
        {"nodes": [], "total": {}, "available": {}, "jobs": [], "queue_capacity": {"ddp": {"wanted": None}}}
    )
    assert not [line for line in quiet if "queue:" in line]  # nothing waits: no line


def test_a_partial_snapshot_shows_what_it_has_and_never_a_traceback():
    """A snapshot another head version wrote, with its nodes only (as `rayfleet status` met one in CI): the status
    screen names the nodes it has and leaves the rest out."""
    partial = {"nodes": [{"node_id": "h", "alive": True, "head": True}, {"node_id": "w1", "alive": True}]}
    lines = render_ray(partial)
    assert lines[0].startswith("  2 nodes alive (1 head, 1 worker)")
    assert any(line.split()[:2] == ["worker", "w1"] for line in lines)


def test_the_capacity_section_shows_only_when_instances_are_not_coming():
    base = empty_status()
    reasons = [
        {"reason": "worker group: vCPU quota 0 for G and VT instances (VcpuLimitExceeded)", "fatal": True},
        {"reason": "worker service: no container instance can take its task yet", "fatal": False},
    ]
    text = render({**base, "capacity": reasons})
    assert (
        "\ncapacity (the last hour: why instances are not coming)\n"
        "  cannot come: worker group: vCPU quota 0 for G and VT instances (VcpuLimitExceeded)\n"
        "  worker service: no container instance can take its task yet\n"
    ) in text
    assert "capacity (" not in render({**base, "capacity": []}) and "capacity (" not in render(base)


def test_status_says_in_one_line_what_the_queue_holds():
    from rayfleet.ops.status.render import queue_line

    assert queue_line([]) == "  empty: nothing waits and no queued run runs"
    queue = [
        {"run": "a", "state": "running", "reason": "running"},
        {"run": "b", "state": "held", "reason": "held: its projected $5.00 would pass ..."},
        {"run": "c", "state": "waiting", "reason": "first of 1 in the queue"},
    ]
    assert queue_line(queue) == (
        "  1 running, 1 waiting, 1 held by the budget; next: c (first of 1 in the queue); `rayfleet queue` for all"
    )
    assert "queue\n  empty" in render({**empty_status(), "queue": []})
    forged = {"run": "x", "state": "ignored", "reason": "admitted_at is in the future"}
    assert queue_line([*queue, forged]).startswith("  1 running, 1 waiting, 1 held by the budget, 1 ignored (forged")


def test_a_ray_view_older_than_the_stale_threshold_says_so():
    """After a rotation the control task could not read the head and the snapshot stopped: `status` must not show
    the old view as the cluster now."""
    from datetime import UTC, datetime, timedelta

    from rayfleet.ops.status.gather import STALE_AFTER_S, ray_section

    now = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    old = {"taken_at": (now - timedelta(seconds=STALE_AFTER_S + 1)).isoformat(), "nodes": []}
    fresh = {"taken_at": (now - timedelta(seconds=STALE_AFTER_S - 1)).isoformat(), "nodes": []}
    assert ray_section(old, now)["ray_stale"] and not ray_section(fresh, now)["ray_stale"]
    assert ray_section({"taken_at": "garbage", "nodes": []}, now)["ray_stale"]  # unknown age is not fresh
    assert not ray_section(None, now)["ray_stale"]
    text = render({**empty_status(), **ray_section(old, now)})
    assert f"STALE: this view is {STALE_AFTER_S + 1} s old" in text and f"stale after {STALE_AFTER_S} s" in text
    assert "STALE" not in render({**empty_status(), **ray_section(fresh, now)})


def test_status_lists_the_control_service_beside_the_head_and_workers():
    from rayfleet.ecs.outputs import Outputs
    from rayfleet.ops.status.gather import service_names

    names = dict(head_service_name="c-ray-head", worker_service_name="c-ray-worker")
    flat = dict(region="r", cluster_name="c", private_subnet_ids=[], task_security_group_id="sg")
    flat |= dict(trainer_task_definition="td", results_bucket="b", trainer_log_group="g", **names)
    out = Outputs.from_flat(**flat)
    assert service_names(out) == ["c-ray-head", "c-ray-worker"]  # a deployment from before the control task
    with_control = Outputs.from_flat(**flat, control_service_name="c-ray-control")
    assert service_names(with_control) == ["c-ray-head", "c-ray-worker", "c-ray-control"]


def test_job_written_fields_reach_the_terminal_without_control_characters():
    escape = "\x1b]0;owned\x07\x1b[2J\x1b[1A"
    ray = {
        "taken_at": "2026-11-23T12:00:00+00:00",
        "nodes": [],
        "jobs": [{"submission_id": f"job{escape}", "status": f"RUNNING{escape}", "start_time": None}],
        "serve": [
            {"name": f"app{escape}", "status": "RUNNING", "route_prefix": "/", "message": escape, "deployments": []}
        ],
        "serve_kept": {"run": f"kept{escape}", "reapplied": [f"a{escape}"]},
        "autostop": {"busy": f"run{escape}", "idle_min": 30},
        "queue_capacity": {"wanted": 1, "why": f"run{escape}", "desired": 0},
    }
    runs = [{"run": f"r{escape}", "state": f"RUNNING{escape}", "last_checkpoint": escape, "results": escape}]
    queue = [{"run": f"q{escape}", "state": "waiting", "reason": f"why{escape}"}]
    text = render({**empty_status(), "ray": ray, "runs": runs, "queue": queue})
    assert "job?]0;owned??[2J?[1A" in text and "r?]0;owned" in text and "q?]0;owned" in text
    assert not [c for c in text if c != "\n" and (ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F)]


def test_staleness_is_judged_by_s3s_clock_not_the_laptops():
    """A laptop whose clock is an hour off must neither call a fresh view stale nor an old one fresh: the age is
    S3's answer time (its Date header) less when the snapshot was written (LastModified)."""
    import io
    from datetime import UTC, datetime, timedelta

    from rayfleet.ops.status.gather import STALE_AFTER_S, ray_section, ray_view

    written = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)

    class S3:
        class exceptions:
            NoSuchKey = KeyError

        def __init__(self, seconds_later):
            self.answered = written + timedelta(seconds=seconds_later)

        def get_object(self, Bucket, Key):
            date = self.answered.strftime("%a, %d %b %Y %H:%M:%S GMT")
            body = io.BytesIO(b'{"taken_at": "2026-11-23T12:00:00+00:00", "nodes": []}')
            return {"Body": body, "LastModified": written, "ResponseMetadata": {"HTTPHeaders": {"date": date}}}

    laptop_an_hour_ahead = written + timedelta(hours=1)
    ray, age = ray_view(S3(30), "b")
    assert age == 30 and not ray_section(ray, laptop_an_hour_ahead, age)["ray_stale"]
    ray, age = ray_view(S3(STALE_AFTER_S + 60), "b")
    assert ray_section(ray, written, age)["ray_stale"]  # the laptop's clock says 0 s; S3's says stale


def test_each_worker_group_is_one_line_with_its_nodes_gpus_price_and_waiting_runs():
    waiting = {"run": "big", "reason": "waits for 2 node(s)", "since_s": 180}
    groups = [
        {"group": "ddp", "desired": 1, "running": 1, "max": 2, "gpus": 1, "usd_per_hour": 1.006, "waiting": 0},
        {"group": "fsdp", "desired": 2, "running": 0, "max": 2, "gpus": 0, "usd_per_hour": 0.0, "waiting": 1,
         "first": waiting},
    ]  # fmt: skip
    shown = render({**empty_status(), "groups": groups}).splitlines()
    at = shown.index("worker groups   nodes    GPUs   $/h    waiting")
    assert shown[at + 1 : at + 3] == [
        "  ddp           1/1 of 2 1      1.01   0",
        "  fsdp          0/2 of 2 0      0.00   1 (big: waits for 2 node(s), 3 min)",
    ]
