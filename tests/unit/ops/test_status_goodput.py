"""`rayfleet status`'s goodput of the last 7 days (rayfleet/ops/status/goodput.py): the worker nodes' time from
what AWS keeps (the GPU instances up now, the Auto Scaling launch and termination activities), the runs'
ledgers summed, the idle rest, and the biggest loss; a forged ledger counts for nothing."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from rayfleet.core import ledger
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops.status import goodput

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)
SINCE = NOW - goodput.WINDOW
G5 = 1.006  # g5.xlarge's list price per hour (training/rayfleet/core/instance_types.json)


def outputs(tmp_path) -> Outputs:
    names = {"region": "us-east-1", "cluster_name": "rf", "private_subnet_ids": [], "task_security_group_id": "sg"}
    names |= {"trainer_task_definition": "t", "head_service_name": "h", "results_bucket": "b", "trainer_log_group": "l"}
    group = {"service_name": "w", "instance_types": ["g5.xlarge"], "autoscaling_group": "asg-ddp"}
    (tmp_path / "o.json").write_text(json.dumps({**names, "worker_groups": {"ddp": group}}))
    return Outputs.load(tmp_path / "o.json")


def activity(what: str, instance: str, at: datetime, code: str = "Successful") -> dict:
    verb = "Launching a new EC2 instance" if what == "launch" else "Terminating EC2 instance"
    return {"Description": f"{verb}: {instance}", "StatusCode": code, "StartTime": at, "EndTime": at}


def test_the_worker_nodes_time_comes_from_the_instances_and_the_scaling_activities(tmp_path):
    running = [
        {"instance_id": "i-0a", "instance_type": "g5.xlarge", "gpus": 1, "launch_time": NOW - timedelta(hours=10)},
        {"instance_id": "i-0h", "instance_type": "m5.2xlarge", "gpus": 0, "launch_time": SINCE},  # the head
    ]
    activities = {
        "ddp": [
            activity("launch", "i-01", NOW - timedelta(days=3)),
            activity("terminate", "i-01", NOW - timedelta(days=1)),  # 48 h within the window
            activity("terminate", "i-02", NOW - timedelta(days=2)),  # launched before it: from its start, 120 h
            activity("launch", "i-03", NOW - timedelta(hours=1), code="Failed"),  # never came
            activity("launch", "i-0a", NOW - timedelta(hours=10)),  # up now: counted once
        ]
    }
    usd = goodput.worker_usd(outputs(tmp_path), running, activities, SINCE, NOW)
    assert usd == pytest.approx((10 + 48 + 120) * G5)


def test_the_window_sums_the_ledgers_adds_the_idle_time_and_names_the_biggest_loss():
    run = ledger.build(0.0, 36 * 3600 / 1.0, [{"seconds": {"compute": 30 * 3600, "checkpoint": 5 * 3600}}], 1.0)
    forged = {"phases": [{"phase": "compute", "usd": 1e9}, {"phase": "compute", "usd": 1.0}]}  # twice: not a ledger
    s = goodput.summary([run, forged, None, "x"], nodes_usd=100.0)
    assert s["runs"] == 1 and s["usd"] == 100.0 and s["idle_usd"] == 64.0
    assert s["goodput"] == 0.3 and s["biggest_loss"] == {"what": "nodes idle between runs", "share": 0.64}
    assert goodput.line(s) == (
        "  30% of $100.00 of worker time went to compute, last 7 days (1 run(s); idle $64.00); "
        "biggest loss: nodes idle between runs 64%"
    )
    busy = goodput.summary([run], nodes_usd=30.0)  # fewer node dollars than the runs' (list vs Spot): no idle
    assert busy["idle_usd"] == 0.0 and busy["biggest_loss"]["what"] == "checkpoint pauses"
    assert goodput.line(goodput.summary([], None)) == "  no priced run or worker node time in the last 7 days"


def test_only_the_runs_that_started_within_the_window_count():
    rows = [{"started": (NOW - timedelta(days=d)).isoformat(timespec="seconds"), "ledger": d} for d in (1, 6, 8)]
    assert goodput.within(rows, SINCE) == [1, 6]
