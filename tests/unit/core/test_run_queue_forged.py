"""Issue 54 R2: what a job can write under queue/ (any job may: one task role) and what the readers make of it
(rayfleet/core/run_queue.py, rayfleet/core/run_queue_checks.py). Each forged object is ignored with its reason,
never an exception in the reader, and never "nothing runs"."""

from __future__ import annotations

import json
import math

import pytest

from rayfleet.core.run_queue import ADMITTED, RUNNING, WAITING, Budget, Entry, Queue, over_budget, verdict
from rayfleet.core.run_queue_checks import Alive, max_priority_from

NOW = 1_000_000.0


def entry(run: str, **more) -> Entry:
    fields = {"priority": 0, "submitted_at": NOW - 10, "workers": 1, "cpus_per_worker": 1.0, "heartbeat_at": NOW}
    return Entry(run=run, **{**fields, **more})


def forge(tmp_path, name: str, body) -> None:
    """What a job writes with the task role: any object, any bytes, under queue/."""
    folder = tmp_path / "queue"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(body if isinstance(body, str) else json.dumps(body))


def quiet(tmp_path, **more) -> tuple[Queue, list[str]]:
    said: list[str] = []
    return Queue(str(tmp_path), warn=said.append, **more), said


def fields(run: str, **more) -> dict:
    return {"run": run, "priority": 0, "submitted_at": NOW - 5, "workers": 1, "cpus_per_worker": 1.0, **more}


def test_an_entry_admitted_in_the_future_does_not_block_every_run_forever(tmp_path):
    """Found in the issue: a heartbeat and an admission dated in the future never go stale, and an ADMITTED run
    that has not placed its workers blocks the one behind it until PLACE_TIMEOUT_S after its admission."""
    queue, said = quiet(tmp_path)
    later = NOW + 10 * 365 * 86400
    forge(tmp_path, "blocker.json", fields("blocker", state=ADMITTED, admitted_at=later, heartbeat_at=NOW))
    forge(tmp_path, "undying.json", fields("undying", heartbeat_at=later, priority=9))
    queue.put(entry("me"))
    counted = queue.entries(NOW)
    assert [e.run for e in counted] == ["me"]
    assert verdict("me", counted, NOW) == (True, "first of 1 in the queue")
    ahead = f"{later:.0f} is {later - NOW:.0f} s in the future"
    assert said == [
        f"[rayfleet] queue: {queue.url}/blocker.json ignored: admitted_at {ahead}",
        f"[rayfleet] queue: {queue.url}/undying.json ignored: heartbeat_at {ahead}",
    ]
    queue.entries(NOW)
    assert len(said) == 2  # one warning per reader and object, not one per round


def test_a_clock_a_little_ahead_is_allowed(tmp_path):
    queue, said = quiet(tmp_path)
    queue.put(entry("ahead", heartbeat_at=NOW + 20, submitted_at=NOW + 5))
    assert [e.run for e in queue.entries(NOW)] == ["ahead"] and said == []


@pytest.mark.parametrize(
    ("forged", "reason"),
    [
        ({"priority": "high"}, "priority 'high' is not a whole number"),
        ({"priority": True}, "priority True is not a whole number"),
        ({"priority": -1}, "priority -1 is outside 0..inf"),
        ({"workers": 10**9}, "workers 1000000000 is outside 1..512"),
        ({"cpus_per_worker": float("nan")}, "cpus_per_worker nan is outside 0..1024"),
        ({"submitted_at": "yesterday"}, "submitted_at 'yesterday' is not a number"),
        ({"heartbeat_at": None, "state": "admitted"}, "state admitted without admitted_at"),
        ({"state": "running!"}, "state 'running!' is not one of waiting, held, admitted, running"),
        ({"max_usd": float("inf"), "state": RUNNING}, "max_usd inf is outside 0..1e+07"),
        ({"usd_per_hour": -3.0}, "usd_per_hour -3.0 is outside 0..10000"),
        ({"reason": ["a", "list"]}, "reason ['a', 'list'] is not a line of text"),
        ({"placed": "yes"}, "placed 'yes' is not true or false"),
        ({"group": "a,rayfleet.io/other=b"}, "group 'a,rayfleet.io/other=b' is not a worker group's name"),
        ({"group": 7}, "group 7 is not a worker group's name"),
        ({"evil": 1}, "not a queue entry: unknown 'evil'"),
        ({"submitted_at": 10**400}, f"submitted_at {str(10**400)[:37]}... is outside 0..inf"),  # past any float
        ({"workers": 10**400}, f"workers {str(10**400)[:37]}... is outside 1..512"),
    ],
)
def test_an_entry_of_the_wrong_type_or_out_of_bounds_is_ignored_with_its_reason(tmp_path, forged, reason):
    """Found in the issue: a wrong type crashed every reader (sorting `-"high"`), so every queued job's admission."""
    queue, said = quiet(tmp_path)
    forge(tmp_path, "bad.json", {**fields("bad", heartbeat_at=NOW), **forged})
    queue.put(entry("me"))
    counted, ignored = queue.scan(NOW)
    assert [e.run for e in counted] == ["me"]
    assert [(i.name, i.reason) for i in ignored] == [("bad.json", reason)]
    assert queue.get("bad") is None and len(said) == 1


@pytest.mark.parametrize(
    ("name", "body", "reason"),
    [
        ("other.json", fields("victim", heartbeat_at=NOW), "not the file's name"),
        ("..json", fields(".", heartbeat_at=NOW), "is not a run name"),
        ("x\x1b[2J.json", fields("x\x1b[2J", heartbeat_at=NOW), "is not a run name"),
        ("list.json", "[1, 2]", "not a JSON object"),
        ("deep.json", "[" * 100_000, "not JSON"),
        ("nan.json", "NaN", "not a JSON object"),
    ],
)
def test_an_entry_that_is_not_its_own_runs_is_ignored(tmp_path, name, body, reason):
    queue, said = quiet(tmp_path)
    forge(tmp_path, name, body)
    counted, ignored = queue.scan(NOW)
    assert counted == [] and len(ignored) == 1 and reason in ignored[0].reason
    assert "\x1b" not in said[0]  # the warning is one printable line


def test_a_priority_above_the_deployments_highest_is_clamped_not_obeyed(tmp_path):
    """A job that writes priority 10**9 for itself goes no further forward than the operator's highest."""
    queue, said = quiet(tmp_path, max_priority=5)
    forge(tmp_path, "pushy.json", fields("pushy", priority=10**9, submitted_at=NOW - 1, heartbeat_at=NOW))
    queue.put(entry("honest", priority=5, submitted_at=NOW - 2))
    counted = queue.entries(NOW)
    assert [(e.run, e.priority) for e in counted] == [("honest", 5), ("pushy", 5)]  # then the earlier submission
    assert verdict("honest", counted, NOW)[0]
    assert said == [f"[rayfleet] queue: {queue.url}/pushy.json ignored: priority 1000000000 clamped to 5 "
                    "(RAYFLEET_MAX_PRIORITY)"]  # fmt: skip


def test_the_highest_priority_is_the_operators_setting_with_the_recipes_range_by_default():
    assert max_priority_from({}) == 9 and max_priority_from({"RAYFLEET_MAX_PRIORITY": "4"}) == 4
    assert max_priority_from({"RAYFLEET_MAX_PRIORITY": "99"}) == 9 == max_priority_from({"RAYFLEET_MAX_PRIORITY": "x"})


def test_an_entry_counts_only_while_its_run_has_a_live_job(tmp_path):
    """Found in the issue: a fresh entry of a run with no job (forged, or refreshed by a job that ended) held
    the runs behind it and kept the workers up for as long as something refreshed it."""
    queue, said = quiet(tmp_path)
    queue.put(entry("ghost", priority=9, submission_id="rayfleet-ghost-1"))
    queue.put(entry("live", submission_id="rayfleet-live-1"))
    queue.put(entry("stolen-id", submission_id="rayfleet-other"))
    jobs = [
        {"submission_id": "rayfleet-live-1", "status": "RUNNING", "metadata": {"rayfleet_run": "live"}},
        {"submission_id": "rayfleet-ghost-1", "status": "FAILED", "metadata": {"rayfleet_run": "ghost"}},
        {"submission_id": "rayfleet-stolen-1", "status": "PENDING", "metadata": {"rayfleet_run": "stolen-id"}},
        {"submission_id": None, "status": "RUNNING", "metadata": None},  # a driver job: no run
    ]
    counted, ignored = queue.scan(NOW, Alive.of(jobs))
    assert [e.run for e in counted] == ["live"]
    assert {i.name: i.reason for i in ignored} == {
        "ghost.json": "its run has no live Ray job or trainer task",
        "stolen-id.json": "its submission 'rayfleet-other' is not the run's live Ray job",
    }
    assert len(said) == 2 and all(" ignored: its " in line for line in said)
    assert [e.run for e in queue.entries(NOW, Alive.of(trainer_runs=["ghost"]))] == ["ghost"]  # its ECS trainer
    assert len(queue.entries(NOW)) == 3  # liveness not known: every fresh, valid entry counts, as before


def test_the_reader_never_raises_on_a_folder_or_bytes_that_are_not_text(tmp_path):
    queue, _ = quiet(tmp_path)
    (tmp_path / "queue" / "dir.json").mkdir(parents=True)
    (tmp_path / "queue" / "bytes.json").write_bytes(b"\xff\xfe{")
    (tmp_path / "queue" / "spent" / "bytes-1.json").parent.mkdir()
    (tmp_path / "queue" / "spent" / "bytes-1.json").write_bytes(b"\xff")
    counted, ignored = queue.scan(NOW)
    assert counted == [] and [(i.name, i.reason) for i in ignored] == [("bytes.json", "not a readable file")]
    assert queue.spent(0.0, NOW, entries=[]) == 0.0


def ledger(tmp_path, name: str, body) -> None:
    forge(tmp_path, f"spent/{name}", body)


@pytest.mark.parametrize(
    ("name", "item", "reason"),
    [
        ("neg-1000.json", {"run": "neg", "usd": -1e9, "admitted_at": 1000.0, "ended_at": 4600.0}, "usd -1000000000.0"),
        (
            "huge-1000.json",
            {"run": "huge", "usd": 1e12, "admitted_at": 1000.0, "ended_at": 4600.0},
            "usd 1000000000000",
        ),
        ("nan-1000.json", {"run": "nan", "usd": math.nan, "admitted_at": 1000.0, "ended_at": 4600.0}, "usd nan"),
        ("str-1000.json", {"run": "str", "usd": "5", "admitted_at": 1000.0, "ended_at": 4600.0}, "not a number"),
        ("late-1000.json", {"run": "late", "usd": 1.0, "admitted_at": 1000.0, "ended_at": NOW * 9}, "in the future"),
        ("x-1000.json", {"run": "other", "usd": 1.0, "admitted_at": 1000.0, "ended_at": 4600.0}, "do not name"),
        ("back-5000.json", {"run": "back", "usd": 1.0, "admitted_at": 5000.0, "ended_at": 4600.0}, "ended before"),
        ("inf-1000.json", {"run": "inf", "usd": 1.0, "admitted_at": 1000.0, "ended_at": 10**400}, "ended_at 1000"),
        ("more-1000.json", {"run": "more", "usd": 1.0, "admitted_at": 1000.0, "ended_at": 4600.0, "x": 1}, "keys"),
    ],
)
def test_a_ledger_item_the_budget_code_could_not_have_written_counts_for_nothing(tmp_path, name, item, reason):
    """Found in the issue: a negative item turned the queue's budget off, a huge one held every run, NaN both."""
    queue, said = quiet(tmp_path, budget=Budget(10.0, "total"))
    queue.record_spent(entry("real", usd_per_hour=2.0, admitted_at=NOW - 3600, state=RUNNING), NOW)  # $2, real
    ledger(tmp_path, name, item)
    spent = queue.spent(0.0, NOW, entries=[])
    assert spent == pytest.approx(2.0)
    assert len(said) == 1 and f"spent/{name} ignored: " in said[0] and reason in said[0]
    held = over_budget(entry("next", max_usd=9.0, usd_per_hour=1.0), queue.budget, spent)
    assert held is not None and "$8.00 left" in held  # the budget neither off nor spent by the forgery
    assert over_budget(entry("next", max_usd=7.0, usd_per_hour=1.0), queue.budget, spent) is None


def test_the_runs_own_entries_still_read_back_as_written(tmp_path):
    queue, said = quiet(tmp_path)
    mine = entry(
        "mine", state=ADMITTED, admitted_at=NOW - 1, usd_per_hour=1.5, max_usd=3.0, max_hours=2.0, group="large"
    )
    mine.submission_id, mine.who, mine.recipe, mine.reason = "rayfleet-mine-1", "me@host", "ddp", "placing"
    queue.put(mine)
    assert queue.get("mine") == mine and queue.entries(NOW) == [mine] and said == []
    assert queue.get("mine").state == ADMITTED != WAITING


def test_a_ledger_item_longer_than_any_run_counts_for_nothing():
    """$10,000 an hour over a made-up lifetime since 1970 would be a plausible rate and a budget held forever."""
    from rayfleet.core.run_queue_checks import MAX_HOURS, Invalid, ledger_item

    now = 1_790_000_000.0
    item = {"run": "old", "usd": 4e8, "admitted_at": 1, "ended_at": now - 5}
    with pytest.raises(Invalid, match="ran longer than any run may"):
        ledger_item(json.dumps(item), "old-1.json", now)
    fine = {"run": "old", "usd": 5.0, "admitted_at": now - MAX_HOURS * 3600, "ended_at": now}
    assert ledger_item(json.dumps(fine), f"old-{int(now - MAX_HOURS * 3600)}.json", now) == (5.0, now)
