"""`rayfleet queue`: the local cluster's queue read from its state directory, in order, with positions and why."""

from __future__ import annotations

import json
import time

from rayfleet.cli import main as cli
from rayfleet.core.run_queue import RUNNING, Entry, Queue
from rayfleet.ops.runs.queued import rows


def test_the_queue_lists_running_then_waiting_runs_with_positions_and_reasons(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RAYFLEET_OUTPUTS", str(tmp_path / "none.json"))
    now = time.time()
    queue = Queue(str(tmp_path / "cluster"))
    for run, priority, at, state in (("low", 0, 1, "waiting"), ("high", 5, 2, "waiting"), ("busy", 0, 0, RUNNING)):
        queue.put(
            Entry(
                run=run,
                priority=priority,
                submitted_at=now - 10 + at,
                workers=2,
                cpus_per_worker=1.0,
                state=state,
                heartbeat_at=now,
                reason=f"why {run}",
                who="me@laptop",
            )
        )
    assert cli.main(["queue"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:5] == ["POS", "RUN", "WHERE", "GROUP", "STATE"]
    assert [line.split()[:6] for line in lines[1:]] == [
        ["-", "busy", "local", "-", "running", "0"],
        ["1", "high", "local", "-", "waiting", "5"],
        ["2", "low", "local", "-", "waiting", "0"],
    ]
    assert lines[2].endswith("why high") and "2 x 1 CPU" in lines[2]
    assert cli.main(["queue", "--json"]) == 0
    assert [r["position"] for r in json.loads(capsys.readouterr().out)] == [None, 1, 2]


def test_an_empty_queue_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("RAYFLEET_OUTPUTS", str(tmp_path / "none.json"))
    assert cli.main(["queue"]) == 0 and "the queue is empty" in capsys.readouterr().out


def test_each_waiting_run_has_its_latest_start_and_each_run_its_cost_so_far():
    from rayfleet.ops.runs.queued import rows, table

    now = 1_000_000.0

    def entry(run: str, at: float, state: str = "waiting", **extra) -> Entry:
        return Entry(run=run, priority=0, submitted_at=at, workers=1, cpus_per_worker=1.0, state=state, **extra)

    busy = entry("busy", 0, RUNNING, admitted_at=now - 1800, max_hours=1.0, usd_per_hour=4.0)
    first, second = entry("first", 1, max_hours=2.0), entry("second", 2)
    third = entry("third", 3, max_hours=1.0)
    found = rows([busy, first, second, third], "ecs", now)
    by_run = {r["run"]: r for r in found}
    assert by_run["busy"]["cost_usd"] == 2.0 and by_run["busy"]["start_at"] is None  # half an hour at $4
    assert by_run["first"]["start_at"] == now + 1800  # busy's max_hours end
    assert by_run["second"]["start_at"] == now + 1800 + 7200  # then first's two hours
    assert by_run["third"]["start_at"] is None  # second has no max_hours: nothing bounds it
    lines = table(found, now).splitlines()
    start, cost = lines[0].index("START"), lines[0].index("COST")
    assert [line[start:cost].strip() for line in lines[1:]] == ["-", "<30m", "<150m", "?"]
    assert [line[cost : cost + 10].strip() for line in lines[1:]] == ["$2.00", "$0.00", "$0.00", "$0.00"]


def test_each_group_has_its_own_line_of_positions():
    """A run's place counts the waiting runs that share its workers (run_queue.shares_workers): a run on one group
    is first in its line whatever waits on another; a run on no group lines up with all."""
    now = time.time()
    given = {"workers": 1, "cpus_per_worker": 1.0, "state": "waiting", "heartbeat_at": now, "priority": 0}
    entries = [
        Entry(run="a", submitted_at=now - 4, group="ddp", **given),
        Entry(run="b", submitted_at=now - 3, group="fsdp", **given),
        Entry(run="c", submitted_at=now - 2, group="ddp", **given),
        Entry(run="d", submitted_at=now - 1, **given),
    ]
    assert [(r["run"], r["group"], r["position"]) for r in rows(entries, "ecs", now)] == [
        ("a", "ddp", 1),
        ("b", "fsdp", 1),
        ("c", "ddp", 2),
        ("d", "", 4),
    ]
