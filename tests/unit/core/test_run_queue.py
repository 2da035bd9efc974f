"""The run queue's rules (rayfleet/core/run_queue.py): order, gang admission one at a time, no backfill, stale
entries, and the store the jobs share (here a local directory; S3 goes through the same RunDir)."""

from __future__ import annotations

from rayfleet.core.run_queue import ADMITTED, PLACE_TIMEOUT_S, RUNNING, STALE_S, Entry, Queue, verdict, waiting

NOW = 1_000_000.0


def entry(run: str, priority: int = 0, at: float = 0.0, **more) -> Entry:
    return Entry(
        run=run, priority=priority, submitted_at=NOW + at, workers=2, cpus_per_worker=1.0, heartbeat_at=NOW, **more
    )


def test_higher_priority_first_then_the_earlier_submission_then_the_name():
    queue = [entry("late", at=5), entry("b", at=1), entry("a", at=1), entry("urgent", priority=3, at=9)]
    assert [e.run for e in waiting(queue)] == ["urgent", "a", "b", "late"]


def test_only_the_first_waiting_run_may_try_and_the_others_say_behind_whom():
    queue = [entry("first"), entry("second", at=1), entry("third", at=2)]
    assert verdict("first", queue, NOW) == (True, "first of 3 in the queue")
    ok, why = verdict("third", queue, NOW)
    assert not ok and why == "position 3 of 3: behind first (priority 0)"


def test_no_backfill_a_small_run_behind_a_big_one_waits_even_with_workers_free():
    big = entry("big", at=0)
    big.workers = 8
    small = entry("small", at=1)
    small.workers = 1
    ok, why = verdict("small", [big, small], NOW)
    assert not ok and "behind big" in why


def test_a_running_run_is_not_in_the_way_but_an_admitted_one_placing_its_workers_is():
    running = entry("running", state=RUNNING, placed=True, admitted_at=NOW - 100)
    assert verdict("next", [running, entry("next")], NOW)[0]
    placing = entry("placing", state=ADMITTED, admitted_at=NOW - 10)
    assert verdict("next", [placing, entry("next")], NOW) == (False, "waiting for placing to place its workers")
    placing.admitted_at = NOW - PLACE_TIMEOUT_S - 1  # never placed anything: it blocks no longer
    assert verdict("next", [placing, entry("next")], NOW)[0]


def test_the_store_keeps_one_file_per_run_drops_stale_entries_and_ignores_strangers(tmp_path):
    queue = Queue(str(tmp_path))
    queue.put(entry("waits", at=2))
    queue.put(entry("runs", state=RUNNING, placed=True))
    gone = entry("gone")
    gone.heartbeat_at = NOW - STALE_S - 1
    queue.put(gone)
    (tmp_path / "queue" / "notes.json").write_text("{not an entry")
    live = queue.entries(NOW)
    assert [e.run for e in live] == ["runs", "waits"]  # running first, the stale one counts for nothing
    assert queue.get("waits") == entry("waits", at=2)
    queue.remove("waits")
    assert [e.run for e in queue.entries(NOW)] == ["runs"]
    assert queue.url == f"{tmp_path}/queue"
