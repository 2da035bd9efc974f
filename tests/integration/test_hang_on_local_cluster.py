"""A hung collective on the real local cluster, found and acted on by the hang watchdog
(rayfleet/train/hang_watch.py) through a node that joins as the ECS worker's entry point does.

One run (tests/integration/jobs/hang_job.py, hang_floor_s=8, max_heals=1) whose rank 1 blocks in a gloo
all-reduce five steps into every attempt. It proves what no cheaper test does: the watchdog sees the hang
within its window from real beats, names rank 1 and its node, marks that node suspect through the entry
point (which drains it like a preemption: Ray records why), Ray Train restarts the group on the session's
healthy workers from the last checkpoint, the second hang fails the run with its evidence (both hangs in
hangs.jsonl, a "hang:" line each for the recipe watcher's notification); while a hang holds, the control
task's snapshot, read through the dashboard as on ECS, lists the run as hung (so autostop does not count it).
A run that hangs once and then finishes differs only in not hanging again (the heal is the same).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from rayfleet.node.head_snapshot import snapshot, token
from tests.integration.helpers import DASHBOARD_PORT, REPO
from tests.integration.node_helpers import dead_messages, entry_point_node, wait_for

pytestmark = pytest.mark.integration
FLOOR_S = 8


def test_a_rank_blocked_in_an_all_reduce_is_named_its_node_drained_and_the_second_hang_fails_the_run(
    cluster_env, tmp_path
):
    marks = tmp_path / "current-run"  # the worker task's current-run volume, where the watchdog marks the node
    marks.mkdir()
    log = tmp_path / "node.log"
    node = entry_point_node(
        cluster_env, tmp_path, log, RAYFLEET_CURRENT_RUN_DIR=str(marks), RAYFLEET_DRAIN_DEADLINE_S="10"
    )
    job = None
    try:
        wait_for(lambda: "ray start" in log.read_text(), 60, "node start", node)
        command = [sys.executable, str(REPO / "tests/integration/jobs/hang_job.py"), f"storage={tmp_path}"]
        command += ["run_name=hung", f"hang_floor_s={FLOOR_S}", "max_heals=1", "max_failures=0"]
        with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:  # files: no pipe to fill
            env = {**cluster_env, "RAY_DEDUP_LOGS": "0"}  # Ray folds lines that differ only in numbers
            job = subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=err)
        # While the first hang's verdict holds, the control task's snapshot (the dashboard, as on ECS) lists
        # the run as hung, and autostop does not count it as work.
        dashboard = f"http://127.0.0.1:{DASHBOARD_PORT}"
        wait_for(lambda: "hung" in snapshot(dashboard, token(cluster_env))["hung_runs"], 240, "the hung marker", job)
        job.wait(timeout=300)
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        if job is not None and job.poll() is None:
            job.kill()
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert job.returncode == 1, out[-4000:] + err[-4000:]
    hangs = [json.loads(line) for line in (tmp_path / "hung" / "hangs.jsonl").read_text().splitlines()]
    assert [h["action"] for h in hangs] == ["heal", "fail"] and all(h["laggards"] == [1] for h in hangs)
    for hang in hangs:  # seen within the window (plus two beats of reporting), never before it
        assert FLOOR_S <= hang["silent_s"] <= FLOOR_S + 5, hang
        rank0, rank1 = hang["ranks"]["0"], hang["ranks"]["1"]
        assert rank0["entered"] == rank0["finished"] + 1 == rank1["entered"] + 1 == rank1["finished"] + 1
    first, second = hangs
    assert first["ranks"]["1"]["finished"] == second["ranks"]["1"]["finished"] == 6  # steps of each attempt
    assert "rank 0 starts at step 0" in out and "rank 0 starts at step 6" in out  # from the last checkpoint
    lines = re.findall(r"^hang: .*$", out, flags=re.M)
    assert len(lines) == 2 and "rank 1 on" in lines[0] and lines[0].endswith("heal (1 heal(s) so far)")
    assert "error: the run hung again after 1 heal(s): no step finished for" in err and "rank 1 on" in err
    # The suspect node: marked by rank 1's watchdog, drained by its entry point, ended as a preemption with why.
    node_out = log.read_text()
    assert "node suspect: hang: no step finished for" in node_out and ": draining this node" in node_out
    assert "stopping the Ray node: " in node_out and node.returncode == 0  # it left by itself
    assert any(m.startswith("Terminated due to preemption: node suspect: hang: ") for m in dead_messages(cluster_env))
