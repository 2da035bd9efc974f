"""A recipe run's ledger as its follower closes it (rayfleet/recipes/run_ledger.py): from `rayfleet run`'s start
when the record says it (the nodes' wait and the queue's before the job's loop), the job's phases, the rest
unaccounted, the estimate set against the actual; what the record holds that is no number is left out."""

from __future__ import annotations

import json

from rayfleet.core import ledger
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import run_ledger


def test_the_ledger_starts_at_the_submission_with_the_nodes_and_the_queues_waits(tmp_path, monkeypatch, capsys):
    now = 10_000.0
    monkeypatch.setattr(run_ledger.time, "time", lambda: now)
    run_dir = RunDir(str(tmp_path), "r")
    phases = {"seconds": {"compute": 500.0, "evaluation": 50.0}, "loop_began": 9_300.0, "reported": 9_900.0}
    estimate = {"duration": {"mean_s": 600.0}, "cost": {"mean_usd": 0.6}}
    run_dir.write(
        "run.json",
        json.dumps(
            {
                ledger.SUBMITTED: 9_000.0,  # `rayfleet run` began here, 100 s before the job was submitted
                ledger.NODE_WAIT: 120.0,
                "queue_wait_s": 30.0,
                "phases/0": phases,
                "estimate": estimate,
                "job_id": "rayfleet-r-abc123",
            }
        ),
    )
    run_ledger.close(run_dir, began_at=9_100.0, held={"usd_per_hour": 3.6})
    built = run_dir.record()["ledger"]
    seconds = {r["phase"]: r["seconds"] for r in built["phases"]}
    assert built["wall_s"] == 1000.0 and built["usd_per_hour"] == 3.6 and built["cost_usd"] == 1.0
    assert built["dashboard_page"] == "/#/jobs/rayfleet-r-abc123"  # the run record links to its page
    assert seconds == {
        "node_start": 120.0,
        "queue": 30.0,
        "run_start": 150.0,  # the rest of the 300 s before the loop: RunTask, the trainer, the job's start
        "compute": 500.0,
        "evaluation": 50.0,
        "teardown": 100.0,
        "unaccounted": 50.0,
    }
    out = capsys.readouterr().out.splitlines()
    assert out[-2:] == [
        "[rayfleet]   estimate 10.0 min, $0.60; actual 16.7 min, $1.00",
        "[rayfleet]   its job in Ray's dashboard: rayfleet dashboard --run r",
    ]


def test_what_is_no_number_is_left_out_and_a_stale_submission_is_not_the_start(tmp_path, monkeypatch):
    monkeypatch.setattr(run_ledger.time, "time", lambda: 10_000.0)
    run_dir = RunDir(str(tmp_path), "r")
    forged = {ledger.SUBMITTED: -1e12, ledger.NODE_WAIT: "a lot", "queue_wait_s": True}
    run_dir.write("run.json", json.dumps(forged))
    run_ledger.close(run_dir, began_at=9_000.0, held={})
    built = run_dir.record()["ledger"]
    assert built["wall_s"] == 1000.0 and [r["phase"] for r in built["phases"]] == ["unaccounted"]
