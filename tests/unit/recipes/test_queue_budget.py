"""The queue's budget (rayfleet/core/run_queue.py `Budget`, `over_budget`, the ledger; its use in
rayfleet/recipes/admission.py): a run whose projected cost would pass what is left is HELD and steps aside,
the run behind it goes, and it goes itself once the spending allows (here: a new month)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import ADMITTED, HELD, RUNNING, Budget, Entry, Queue, over_budget, verdict
from rayfleet.recipes import admission
from rayfleet.recipes.schema import Recipe

MAY_20 = datetime(2026, 5, 20, tzinfo=UTC).timestamp()
JUNE_1 = datetime(2026, 6, 1, tzinfo=UTC).timestamp()


def entry(run: str, at: float = 0.0, **extra) -> Entry:
    return Entry(run=run, priority=0, submitted_at=MAY_20 + at, workers=1, cpus_per_worker=1.0, **extra)


def test_a_budget_is_dollars_a_month_or_in_all_and_anything_else_is_one_line():
    assert Budget.parse("500/month") == Budget(500.0, "month") == Budget.parse("500")
    assert Budget.parse(" $2000/total ") == Budget(2000.0, "total")
    assert Budget.parse("") is None and Budget.parse(None) is None
    for bad in ("lots/month", "-5/month", "500/week"):
        with pytest.raises(ValueError, match=r"^RAYFLEET_QUEUE_BUDGET: .* write 500/month or 2000/total"):
            Budget.parse(bad)
    assert Budget(1, "month").since(MAY_20) == datetime(2026, 5, 1, tzinfo=UTC).timestamp()
    assert Budget(1, "total").since(MAY_20) == 0.0


def test_a_run_is_held_only_when_its_projected_cost_passes_what_is_left():
    budget = Budget(10.0)
    assert over_budget(entry("ok", max_usd=4.0, usd_per_hour=2.0), budget, spent=6.0) is None
    held = over_budget(entry("big", max_usd=5.0, usd_per_hour=2.0), budget, spent=6.0)
    assert held == "held: its projected $5.00 would pass the $4.00 left of the queue's budget of $10.00 a month"
    assert over_budget(entry("free"), budget, spent=99.0) is None  # a local cluster's run costs nothing
    assert over_budget(entry("big", max_usd=5.0, usd_per_hour=2.0), None, spent=99.0) is None  # no budget
    with pytest.raises(ValueError, match="needs max_hours or max_cost_usd"):
        over_budget(entry("open", usd_per_hour=2.0), budget, spent=0.0)


def test_the_projected_cost_is_the_lower_of_the_runs_own_bounds_at_its_price():
    both = Recipe(name="r", entrypoint="t.py", max_hours=2, max_cost_usd=5)
    assert admission.entry_for(both, "r", usd_per_hour=3.0).max_usd == 5.0  # not 2 h x $3
    assert admission.entry_for(Recipe(name="r", entrypoint="t.py", max_hours=1), "r", 3.0).max_usd == 3.0
    assert admission.entry_for(Recipe(name="r", entrypoint="t.py"), "r", 3.0).max_usd is None


def test_the_submitter_refuses_a_bad_budget_and_a_run_no_budget_can_judge(monkeypatch):
    priced = admission.entry_for(Recipe(name="r", entrypoint="t.py"), "r", usd_per_hour=3.0)
    with pytest.raises(ConfigError, match="is not a budget"):
        admission.budget_from({"RAYFLEET_QUEUE_BUDGET": "500/week"}, priced)
    with pytest.raises(ConfigError, match="needs max_hours or max_cost_usd"):
        admission.budget_from({"RAYFLEET_QUEUE_BUDGET": "500/month"}, priced)
    assert admission.budget_from({}, priced) is None
    spec = admission.spec("/q", priced, Budget(500.0))
    queue, back = admission.parse(spec, {})
    assert queue.budget == Budget(500.0) and back == priced


def test_spending_is_the_ledger_of_this_period_and_what_live_runs_held_so_far(tmp_path):
    queue = Queue(str(tmp_path), Budget(10.0))
    april = entry("april", usd_per_hour=1.0, state=RUNNING, admitted_at=MAY_20 - 40 * 86400)
    queue.record_spent(april, MAY_20 - 35 * 86400)  # ended in April: $120, not this month's
    may = entry("may", usd_per_hour=2.0, state=RUNNING, admitted_at=MAY_20 - 7200)
    queue.record_spent(may, MAY_20 - 3600)  # $2
    running = entry("running", usd_per_hour=4.0, state=RUNNING, admitted_at=MAY_20 - 1800)  # $2 so far
    since = queue.budget.since(MAY_20)
    assert queue.spent(since, MAY_20, entries=[running]) == pytest.approx(4.0)
    assert queue.spent(0.0, MAY_20, entries=[]) == pytest.approx(122.0)


def test_a_held_run_steps_aside_the_run_behind_goes_and_the_held_one_goes_next_month(tmp_path, capsys):
    queue = Queue(str(tmp_path), Budget(10.0))
    queue.record_spent(entry("spent", usd_per_hour=8.0, admitted_at=MAY_20 - 7200), MAY_20 - 3600)  # $8 of $10
    clock = [MAY_20]
    big = entry("big", max_usd=5.0, usd_per_hour=2.0)
    small = entry("small", at=1.0, max_usd=1.0, usd_per_hour=2.0)
    placed = []

    def try_place(e: Entry) -> bool:
        placed.append(e.run)
        return True

    def sleep(seconds: float) -> None:  # the held run's job waits; its entry is what the others read
        clock[0] += seconds
        if clock[0] > MAY_20 + 3:
            clock[0] = JUNE_1 + 1  # a new month: the budget is whole again

    runs = RunDir(str(tmp_path / "runs"), "big")
    # big is first but held: the loop below is its job's, until June.
    for waiting in (big, small):
        waiting.heartbeat_at = clock[0]
        queue.put(waiting)
    assert admission.wait_turn(queue, big, runs, try_place, lambda: clock[0], sleep) is None
    out = capsys.readouterr().out
    assert "queued: held: its projected $5.00 would pass the $2.00 left of the queue's budget" in out
    assert placed == ["big"] and queue.get("big").state == ADMITTED  # it asked Ray only once the budget allowed
    # While big was held, small (behind it) was first: its own job would have gone.
    small.heartbeat_at = big.heartbeat_at = MAY_20
    big.state = HELD
    assert verdict("small", [big, small], MAY_20) == (True, "first of 1 in the queue")
    assert json.loads((tmp_path / "queue" / "big.json").read_text())["state"] == ADMITTED


def test_a_run_that_held_money_leaves_its_cost_in_the_ledger(tmp_path):
    queue = Queue(str(tmp_path), Budget(10.0))
    me = entry("me", usd_per_hour=3.6, state=ADMITTED, admitted_at=MAY_20)
    clock = iter([MAY_20 + 1000] * 10)
    with admission.holding(queue, me, lambda: True, clock=lambda: next(clock)):
        pass
    assert queue.get("me") is None and (tmp_path / "queue" / "spent" / f"me-{int(MAY_20)}.json").is_file()
    assert queue.spent(0.0, MAY_20 + 2000, entries=[]) == pytest.approx(1.0)  # 1000 s at $3.60 an hour


def test_a_running_runs_projected_cost_is_reserved_against_the_budget(tmp_path):
    queue = Queue(str(tmp_path), Budget(10.0))
    running = entry("running", state=RUNNING, admitted_at=MAY_20 - 60, usd_per_hour=1.0, max_usd=8.0)
    spending = admission._Spending(queue, lambda: MAY_20)
    assert "$2.00 left" in spending(entry("next", max_usd=5.0, usd_per_hour=1.0), [running])  # 8 reserved
    assert spending(entry("next", max_usd=2.0, usd_per_hour=1.0), [running]) is None
