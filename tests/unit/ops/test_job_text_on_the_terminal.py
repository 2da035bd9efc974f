"""Issue 54 R12: what a job can write (its run record in runs/, a Serve application it deployed) reaches the
operator's terminal through `rayfleet runs`, `rayfleet logs` and `rayfleet serve status`; an escape sequence
there must arrive as plain text (rayfleet/core/terminal.py printable()), never as a control sequence."""

from __future__ import annotations

import json

import pytest

from rayfleet.core.errors import RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.ops import runs as ops_runs
from rayfleet.serve.summary import lines, summarize

ESC = "\x1b"
TITLE = "\x1b]0;owned\x07"  # retitles the window
CLEAR = "\x1b[2J\x1b[H"  # clears the screen: the rows above vanish


def forged_record(root, name: str) -> RunDir:
    run_dir = RunDir(str(root), name)
    record = {"state": f"SUCCEEDED{CLEAR}", "created_at": f"2026-01-01T00:00:00{TITLE}", "cost_usd": "free"}
    run_dir.write("run.json", json.dumps(record))
    return run_dir


def test_runs_table_shows_a_forged_record_without_its_escape_sequences(tmp_path):
    forged_record(tmp_path, f"r1{TITLE}")
    forged_record(tmp_path, "r2")
    text = ops_runs.table(ops_runs.local_runs(tmp_path))
    assert ESC not in text and "\x07" not in text
    assert "SUCCEEDED?[2J?[H" in text and "r1?]0;owned?" in text
    assert len(text.splitlines()) == 3  # the header and one line per run: nothing hidden, nothing added


def test_logs_refusal_names_a_forged_state_as_plain_text(tmp_path, monkeypatch):
    from rayfleet.ops.runs.logs import local_run_log

    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path / "state"))  # no local cluster
    RunDir(str(tmp_path), "r1").write("run.json", json.dumps({"target": "local", "state": f"X{CLEAR}"}))
    with pytest.raises(RayfleetError) as exc:
        local_run_log("r1", follow=False, runs_dir=str(tmp_path))
    assert ESC not in str(exc.value) and "X?[2J?[H" in str(exc.value)


def test_serve_status_lines_show_a_jobs_application_without_escape_sequences():
    details = {
        "applications": {
            f"app{TITLE}": {
                "status": f"DEPLOY_FAILED{CLEAR}",
                "route_prefix": f"/x{CLEAR}",
                "message": f"Traceback\nValueError: boom{CLEAR}",
                "deployments": {f"dep{CLEAR}": {"status": "UNHEALTHY", "replicas": [{"state": f"R{CLEAR}"}]}},
            }
        }
    }
    text = "\n".join(lines(summarize(details)))
    assert ESC not in text and "\x07" not in text
    assert "ValueError: boom?[2J?[H" in text


def test_serve_say_prints_each_line_without_control_characters(capsys):
    from rayfleet.ops.serve import say

    say(f"deploying{TITLE}\nstill{CLEAR}")
    out = capsys.readouterr().out
    assert ESC not in out and out.count("\n") == 2
