"""`rayfleet runs` shows every attempt after the first with why it was started: a resubmission (the recipe's
retries, the one try more for a fault of Ray's, a relaunched trainer) is never silent."""

from __future__ import annotations

import json

from rayfleet.core.run_dir import RunDir
from rayfleet.ops import runs as ops_runs
from rayfleet.recipes import job
from rayfleet.recipes.schema import Recipe

MONITOR = "Unexpected error occurred: RPC error: CANCELLED"


def test_each_resubmission_shows_its_reason_in_the_table_and_the_json(tmp_path, monkeypatch, capsys):
    run_dir = RunDir(str(tmp_path), "r")
    ends = [(1, MONITOR), (3, "boom"), (0, "")]

    def once(recipe, run_dir, **how):  # a stand-in for one submission: it writes what a real one writes
        code, message = ends.pop(0)
        if len(ends) == 1:  # the second attempt's job resumed (rayfleet/train/ddp/report.py's event)
            run_dir.send("resumed", resumed_from={"attempt": 0, "checkpoint": "checkpoint_000003"})
        run_dir.update(state="FAILED" if code else "SUCCEEDED", exit_code=code, message=message)
        return code, None

    monkeypatch.setattr(job, "_run_once", once)
    assert job.run_job(Recipe(name="r", entrypoint="t.py", retries=1), run_dir) == 0
    rows = ops_runs.local_runs(tmp_path)
    table = ops_runs.table(rows).splitlines()
    assert table[1].split()[:5] == ["r", "local", "-", "SUCCEEDED", "3"]  # no worker group recorded: "-"
    assert table[2].startswith("  attempt 2 (FAILED): Ray's job monitor failed the job on an RPC error of its own")
    assert table[2].endswith("; resumed from checkpoint_000003")  # and the third did not resume: none said
    assert table[3] == "  attempt 3 (SUCCEEDED): retries: attempt 2 ended with exit 3"
    assert len(table) == 4
    (row,) = json.loads(json.dumps(rows))
    assert [a["reason"].split(":")[0] for a in row["attempts"]] == [
        "submitted",
        "Ray's job monitor failed the job on an RPC error of its own, not the run's (ray-project/ray#65025)",
        "retries",
    ]
    assert [a["resumed_from"] for a in row["attempts"]] == [None, "checkpoint_000003", None]


def test_a_forged_attempt_list_is_bounded_and_printed_without_control_characters(tmp_path):
    forged = [{"state": "\x1b[2J", "reason": "\x1b]0;owned\x07" + "x" * 5000}] * 5000
    RunDir(str(tmp_path), "f").update(state="FAILED", attempts=forged)
    (row,) = ops_runs.local_runs(tmp_path)
    assert len(row["attempts"]) == ops_runs.MAX_ATTEMPTS_SHOWN and row["attempts"][-1]["attempt"] == 5000
    text = ops_runs.table([row])
    assert "\x1b" not in text and "\x07" not in text
    assert max(len(line) for line in text.splitlines()) < ops_runs.MAX_REASON + 40
