"""Issue 54 R2 and R12 in `rayfleet queue` (rayfleet/ops/runs/queued.py): an object under queue/ that no reader
counts is listed as ignored with the reason, and what a job wrote reaches the terminal without its escapes."""

from __future__ import annotations

import json
import time

from rayfleet.cli import main as cli
from rayfleet.core.run_queue import Entry, Queue


def test_a_forged_entry_is_listed_as_ignored_and_job_text_cannot_drive_the_terminal(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RAYFLEET_OUTPUTS", str(tmp_path / "none.json"))
    now = time.time()
    queue = Queue(str(tmp_path / "cluster"))
    queue.put(
        Entry(
            run="real",
            priority=0,
            submitted_at=now - 5,
            workers=1,
            cpus_per_worker=1.0,
            heartbeat_at=now,
            who="\x1b]0;owned\x07me",
            reason="waiting\x1b[2J\x1b[H",
        )
    )
    forged = {"run": "forged", "priority": 0, "submitted_at": now + 86400, "workers": 1, "cpus_per_worker": 1}
    (tmp_path / "cluster" / "queue" / "forged.json").write_text(json.dumps({**forged, "heartbeat_at": now}))
    assert cli.main(["queue"]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out and "\x07" not in out and err == ""
    rows = {line.split()[1]: line for line in out.splitlines()[1:]}
    assert rows["real"].split()[4] == "waiting" and rows["real"].endswith("waiting?[2J?[H")
    assert rows["forged"].split()[4] == "ignored" and rows["forged"].endswith(" s in the future")
    assert cli.main(["queue", "--json"]) == 0
    listed = {r["run"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["forged"]["state"] == "ignored" and "submitted_at" in listed["forged"]["reason"]
