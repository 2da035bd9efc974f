"""A hung collective on the real local cluster, found and acted on by the hang watchdog
(rayfleet/train/control/hang_watch.py). The run (tests/integration/jobs/hang_job.py, hang_floor_s=8) has rank 1
block in a gloo all-reduce five steps into an attempt.

One run, the fault in every attempt, on a node that joins as the ECS worker's entry point does. Proves what
no cheaper test does: the watchdog sees the hang within its window from real beats, names rank 1 and its node,
marks that node suspect through the entry point (which drains it like a preemption: Ray records why), Ray Train
restarts the group on the session's healthy workers from the last checkpoint; while the verdict holds, the
control task's snapshot, read through the dashboard as on ECS, lists the run as hung (so autostop does not
count it). The second hang is past max_heals=1: the driver aborts the run through Ray Train's own SIGINT
handler and fails with the evidence. Each hang is a "hang:" line (the recipe watcher's notification) and a
row of hangs.jsonl.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from rayfleet.node.control.head_snapshot import snapshot, token
from tests.integration.helpers import DASHBOARD_PORT, REPO
from tests.integration.node_helpers import dead_messages, entry_point_node, wait_for

pytestmark = pytest.mark.integration
FLOOR_S = 8


def hang_job(env: dict, tmp_path, hang: str, *overrides: str) -> subprocess.Popen:
    command = [sys.executable, str(REPO / "tests/integration/jobs/hang_job.py"), hang, f"storage={tmp_path}"]
    command += [f"hang_floor_s={FLOOR_S}", "max_failures=0", *overrides]
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:  # files: no pipe to fill
        env = {**env, "RAY_DEDUP_LOGS": "0"}  # Ray folds lines that differ only in numbers
        return subprocess.Popen(command, env=env, cwd=REPO, stdout=out, stderr=err)


def hangs_of(run_dir) -> list[dict]:
    hangs = [json.loads(line) for line in (run_dir / "hangs.jsonl").read_text().splitlines()]
    for hang in hangs:  # seen within the window (plus two beats of reporting), never before it; rank 1 named
        assert FLOOR_S <= hang["silent_s"] <= FLOOR_S + 5 and hang["laggards"] == [1], hang
        rank0, rank1 = hang["ranks"]["0"], hang["ranks"]["1"]  # rank 0 inside step 7, rank 1 never entered it
        assert rank0["entered"] == rank0["finished"] + 1 == rank1["entered"] + 1 == rank1["finished"] + 1 == 7
    return hangs


def test_a_rank_blocked_in_an_all_reduce_is_named_its_node_drained_the_run_resumes_and_then_fails_past_its_heals(
    cluster_env, tmp_path
):
    """One run, the fault in every attempt, max_heals=1: the first hang is healed (its node drained, the run
    resumed from its last checkpoint on the session's workers), the second is past the heals and fails the run
    with the evidence. (It merges a healed run that finished and a given-up run: a run that finishes after a
    restart from its checkpoint is the retries and preemption tests'.)"""
    marks = tmp_path / "current-run"  # the worker task's current-run volume, where the watchdog marks the node
    marks.mkdir()
    log = tmp_path / "node.log"
    env = {"RAYFLEET_CURRENT_RUN_DIR": str(marks), "RAYFLEET_DRAIN_DEADLINE_S": "6"}
    node = entry_point_node(cluster_env, tmp_path, log, **env)
    job = None
    try:
        wait_for(lambda: "ray start" in log.read_text(), 60, "node start", node)
        job = hang_job(cluster_env, tmp_path, "always", "run_name=hangs", "max_heals=1")
        dashboard = f"http://127.0.0.1:{DASHBOARD_PORT}"
        wait_for(lambda: "hangs" in snapshot(dashboard, token(cluster_env))["hung_runs"], 240, "the marker", job)
        job.wait(timeout=420)
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGKILL)
        if job is not None and job.poll() is None:
            job.kill()
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert job.returncode == 1, out[-4000:] + err[-4000:]
    # the beats' sender check ran on this Ray (it takes beats unchecked only where Ray's actor table is unreadable)
    assert "cannot check beats' senders" not in out + err
    healed, given_up = hangs_of(tmp_path / "hangs")
    assert healed["action"] == "heal" and healed["ranks"]["1"]["node"] == healed["ranks"]["0"]["node"]  # both on it
    assert given_up["action"] == "fail"
    first, second = re.findall(r"^hang: .*$", out, flags=re.M)
    assert "at step 7 of this attempt: rank 1 on " in first and first.endswith("heal (1 heal(s) so far)")
    assert "rank 1 on " in second and second.endswith("fail (1 heal(s) so far)"), second
    # Two attempts, the second from step 6: one worker process each. Ray's log streaming can repeat a line, so the
    # attempts are told apart by the worker's pid, not by counting lines.
    starts = re.findall(r"pid=(\d+)\)\S* rank 0 starts at step (\d+)", out)
    assert [step for _, step in dict.fromkeys(starts)] == ["0", "6"], starts
    assert len({pid for pid, _ in starts}) == 2, starts
    assert "finished step 40" not in out
    assert "error: the run hung again after 1 heal(s): no step finished for" in err and "rank 1 on" in err
    # Only the hung processes acted: the restarted rank 1, on a session worker, did not take the first attempt's
    # verdict for its own (a stale verdict once drained a session worker here); each hung rank 1 marked its node.
    assert out.count("[hang watch] rank 1: marked node") == 2 and "[hang watch] rank 1: drained node" not in out
    # The suspect node: marked by rank 1's watchdog, drained by its entry point, ended as a preemption with why.
    node_out = log.read_text()
    assert "node suspect: hang: no step finished for" in node_out and ": draining this node" in node_out
    assert "stopping the Ray node: " in node_out and node.returncode == 0  # it left by itself
    assert any(m.startswith("Terminated due to preemption: node suspect: hang: ") for m in dead_messages(cluster_env))
