"""A run found LOST by a listing (its follower gone: rayfleet/ops/runs settle) still ends with a goodput ledger,
up to the last time its job reported (rayfleet/core/ledger.py of_lost)."""

from __future__ import annotations

import json
import os
import socket

from rayfleet.core import ledger
from rayfleet.core.run_dir import RunDir
from rayfleet.ops import runs as ops_runs


def test_a_run_whose_submitter_is_gone_is_lost_with_its_ledger(tmp_path):
    run_dir = RunDir(str(tmp_path), "gone")
    record = {
        "state": "RUNNING",
        "submitter": {"host": socket.gethostname(), "pid": os.getpid(), "pid_start": "another process"},
        ledger.SUBMITTED: 1000.0,
        "held": {"usd_per_hour": 0.0},
        "phases/0": {"seconds": {"compute": 30.0}, "loop_began": 1010.0, "reported": 1050.0},
    }
    run_dir.write("run.json", json.dumps(record))
    settled = ops_runs.settle(run_dir, run_dir.record())
    assert settled["state"] == "LOST"
    seconds = {r["phase"]: r["seconds"] for r in settled["ledger"]["phases"]}
    assert settled["ledger"]["wall_s"] == 50.0 and seconds == {"run_start": 10.0, "compute": 30.0, "unaccounted": 10.0}
