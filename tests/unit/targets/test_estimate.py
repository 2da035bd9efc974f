"""`rayfleet run --estimate` (rayfleet/targets/estimate.py): the recipe's past runs on its group give the expected
time and cost, bounded against what a job could have written there; the queue ahead gives the latest start;
with no history it says unknown; and none of it reaches what the queue's budget hold admits."""

from __future__ import annotations

import json
import time

from rayfleet.core import ledger
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import RUNNING, WAITING, Entry, Queue
from rayfleet.recipes import admission
from rayfleet.recipes.schema import Recipe
from rayfleet.targets import estimate


def past(root, name: str, wall, recipe="ddp", group="a", state="SUCCEEDED") -> None:
    RunDir(str(root), name).write(
        "run.json", json.dumps({"recipe": recipe, "group": group, "state": state, "ledger": {"wall_s": wall}})
    )


def test_two_past_runs_on_the_group_give_their_mean_and_range(tmp_path):
    past(tmp_path, "ddp-20261201-100000", 600.0)
    past(tmp_path, "ddp-20261202-100000", 1200.0)
    past(tmp_path, "ddp-20261203-100000", 60.0, group="b")  # another group: another shape
    past(tmp_path, "ddp-20261204-100000", 5.0, state="FAILED")  # a run that failed says nothing of its length
    past(tmp_path, "fsdp-20261204-100000", 9000.0, recipe="fsdp")
    for forged, wall in enumerate((float("nan"), -5.0, True, "600", 1e12)):  # the jobs write runs/: bounded
        past(tmp_path, f"ddp-20261205-10000{forged}", wall)
    durations = estimate.past_durations(str(tmp_path), "ddp", "a")
    assert sorted(durations) == [600.0, 1200.0]
    built = estimate.build("a", 3.6, durations, {"ahead": 0, "start_by": 1000.0}, now=1000.0)
    assert built["duration"] == {"runs": 2, "mean_s": 900.0, "low_s": 600.0, "high_s": 1200.0}
    assert built["cost"] == {"mean_usd": 0.9, "low_usd": 0.6, "high_usd": 1.2}
    assert estimate.lines(built, now=1000.0) == [
        "estimate for group a at $3.60/hour (advice: nothing was started):",
        "  start: now (no run ahead in its queue)",
        "  duration: 15.0 min (from 2 past run(s): 10.0-20.0 min)",
        "  cost: $0.90 ($0.60-$1.20)",
    ]
    actual = ledger.build(0.0, 1500.0, [], 3.6)
    assert ledger.against(built, actual) == "estimate 15.0 min, $0.90; actual 25.0 min, $1.50"


def test_with_no_history_the_duration_and_cost_are_unknown(tmp_path):
    built = estimate.build(None, 0.0, estimate.past_durations(str(tmp_path), "ddp", None), {"ahead": 0}, 0.0)
    assert built["duration"] is None and built["cost"] is None
    assert "  duration: unknown (no ended run of this recipe on this group yet); cost: unknown" in estimate.lines(
        built, now=0.0
    )
    assert ledger.against(built, ledger.build(0.0, 1.0, [], 0.0)) is None


def test_the_runs_ahead_in_the_groups_line_set_the_latest_start(tmp_path):
    now = time.time()
    queue = Queue(str(tmp_path))
    common = {"priority": 0, "submitted_at": now, "workers": 1, "cpus_per_worker": 1.0, "heartbeat_at": now}
    queue.put(Entry(run="r1", state=RUNNING, admitted_at=now - 600, max_hours=1.0, group="a", **common))
    queue.put(Entry(run="w1", state=WAITING, max_hours=0.5, group="a", **common))
    queue.put(Entry(run="other", state=WAITING, max_hours=9.0, group="b", **common))  # another group's line
    ahead = estimate.queue_ahead(str(tmp_path), "a", now)
    assert ahead["ahead"] == 2 and abs(ahead["start_by"] - (now - 600 + 3600 + 1800)) < 1
    line = estimate.lines(estimate.build("a", 0.0, [], ahead, now), now=now)[1]
    assert line == "  start: after 2 run(s) ahead, within 80 min (their max_hours)"
    queue.put(Entry(run="w2", state=WAITING, max_hours=None, group="", **common))  # any node: in every line
    assert estimate.queue_ahead(str(tmp_path), "a", now)["start_by"] is None


def test_forged_past_runs_change_the_advice_and_never_what_the_budget_hold_admits(tmp_path):
    recipe = Recipe.model_validate({"name": "ddp", "entrypoint": "train.py", "max_hours": 2.0})
    before = admission.entry_for(recipe, "ddp-new", usd_per_hour=4.0, clock=lambda: 0.0)
    past(tmp_path, "ddp-20261201-100000", 1.0, group=None)  # a job claims the recipe takes a second
    assert estimate.past_durations(str(tmp_path), "ddp", None) == [1.0]
    after = admission.entry_for(recipe, "ddp-new", usd_per_hour=4.0, clock=lambda: 0.0)
    assert after == before and after.max_usd == 8.0  # max_hours at the price: the recipe's bound, not the past
