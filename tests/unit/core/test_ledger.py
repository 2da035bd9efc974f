"""The goodput ledger (rayfleet/core/ledger.py): phases never overlap or go negative, what no phase explains is
its own row, run start and teardown come from the two processes' timestamps, a run whose loop never reported
still has a ledger, and the DDP loop's accounting of loader waits and redone steps (rayfleet/train/ddp/phases.py)."""

from __future__ import annotations

import pytest

from rayfleet.core import ledger
from rayfleet.core.ledger import LedgerError, Phases
from rayfleet.train.ddp import phases as ddp_phases


def rows(built: dict) -> dict[str, float]:
    return {r["phase"]: r["seconds"] for r in built["phases"]}


def sent(seconds: dict, began: float, reported: float) -> dict:
    return {"seconds": seconds, "loop_began": began, "reported": reported}


def test_the_phases_the_timestamps_and_the_rest_make_the_whole_run():
    built = ledger.build(
        1000.0,
        1100.0,
        [sent({"data": 5, "model_load": 3, "compute": 60, "evaluation": 6, "checkpoint": 4}, 1010.0, 1095.0)],
        usd_per_hour=36.0,
    )
    got = rows(built)
    assert got == {
        "run_start": 10.0,  # the driver's start to the loop's
        "data": 5.0,
        "model_load": 3.0,
        "compute": 60.0,
        "evaluation": 6.0,
        "checkpoint": 4.0,
        "teardown": 5.0,  # the loop's last report to the run's end
        "unaccounted": 7.0,  # never folded into compute
    }
    assert sum(got.values()) == pytest.approx(built["wall_s"]) == 100.0
    assert built["goodput"] == 0.6 and built["cost_usd"] == pytest.approx(1.0)  # $36/h for 100 s
    compute = next(r for r in built["phases"] if r["phase"] == "compute")
    assert compute["share"] == 0.6 and compute["usd"] == pytest.approx(0.6)
    assert [r["phase"] for r in built["phases"]][-1] == "unaccounted"


@pytest.mark.parametrize(
    "seconds, why",
    [
        ({"compute": -1.0}, "phase 'compute'"),
        ({"lunch": 1.0}, "phase 'lunch'"),
        ({"compute": "1"}, "phase 'compute'"),
        ({"compute": float("nan")}, "phase 'compute'"),
        ({"compute": float("inf")}, "phase 'compute'"),
        ({"compute": True}, "phase 'compute'"),
    ],
)
def test_a_negative_or_unknown_phase_is_refused(seconds, why):
    with pytest.raises(LedgerError, match=why):
        ledger.build(0.0, 10.0, [sent(seconds, 0.0, 10.0)], 0.0)


def test_phases_that_add_up_to_more_than_the_run_overlap_and_are_refused():
    with pytest.raises(LedgerError, match="overlap"):
        ledger.build(0.0, 100.0, [sent({"compute": 80, "evaluation": 30}, 0.0, 100.0)], 0.0)


def test_a_run_whose_loop_never_reported_has_a_ledger_of_its_whole_time():
    """A run that failed, was cancelled or was lost before rank 0's first report: all of it unaccounted."""
    built = ledger.build(50.0, 80.0, [], usd_per_hour=3.6)
    assert rows(built) == {"unaccounted": 30.0} and built["goodput"] == 0.0 and built["cost_usd"] == pytest.approx(0.03)
    assert ledger.lines(built)[-1] == "  goodput (compute / total): 0.0%"


def test_the_attempts_of_a_resumed_run_add_up_and_the_gap_between_them_is_unaccounted():
    first = sent({"compute": 20.0}, 5.0, 30.0)
    second = sent({"compute": 30.0, "redone": 4.0}, 50.0, 90.0)
    built = ledger.build(0.0, 100.0, [first, second], 0.0)
    assert rows(built) == {"run_start": 5.0, "compute": 50.0, "redone": 4.0, "teardown": 10.0, "unaccounted": 31.0}
    record = {"phases/0": first, "phases/1": second, "phases": "not an attempt's", "ledger": {}}
    assert ledger.sent_events(record) == [first, second]
    # the name submitted again at 40: its ledger is its own, the first submission's attempt is not in it
    again = ledger.build(40.0, 100.0, [first, second], 0.0)
    assert rows(again) == {"run_start": 10.0, "compute": 30.0, "redone": 4.0, "teardown": 10.0, "unaccounted": 6.0}


def test_phases_time_disjoint_parts_and_move_redone_steps_out_of_compute():
    now = [0.0]
    p = Phases(clock=lambda: now[0], wall=lambda: 1234.0)
    with p.timed("model_load"):
        now[0] += 2.5
    p.add("compute", 10.0)
    p.move("compute", "redone", 4.0)
    p.move("compute", "redone", 100.0)  # never more than there is
    assert p.seconds == {"model_load": 2.5, "compute": 0.0, "redone": 10.0}
    with pytest.raises(LedgerError):
        p.add("compute", -1.0)
    with pytest.raises(LedgerError):
        p.add("coffee", 1.0)
    assert p.event() == {"seconds": p.seconds, "loop_began": 1234.0, "reported": 1234.0}


def test_a_slow_loader_is_data_time_and_the_steps_are_compute(monkeypatch):
    """The DDP loop: the wait for each next batch is data, the epoch's stepping time less those waits compute."""
    now = [0.0]
    monkeypatch.setattr(ddp_phases.time, "perf_counter", lambda: now[0])

    def slow_loader():
        for batch in range(4):
            now[0] += 0.5  # the loader stalls half a second per batch
            yield batch

    p = Phases(clock=lambda: now[0])
    got = []
    for batch in ddp_phases.loader_waits(slow_loader(), p):
        now[0] += 1.0  # the step
        got.append(batch)
    assert got == [0, 1, 2, 3] and p.seconds == {"data": 2.0}
    ddp_phases.account_steps(p, stepping_s=now[0] - p.seconds["data"], redone=1, seen=4 * 64, batch_size=64)
    assert p.seconds == {"data": 2.0, "compute": 3.0, "redone": 1.0}  # one of the four steps repeated a lost one
    assert list(ddp_phases.loader_waits(iter([7]), None)) == [7]


def test_a_lost_run_has_a_ledger_up_to_the_last_time_its_job_reported():
    record = {
        ledger.SUBMITTED: 100.0,
        "held": {"usd_per_hour": 36.0},
        "phases/0": sent({"compute": 40.0, "data": 5.0}, 110.0, 160.0),
    }
    built = ledger.of_lost(record)
    assert built["wall_s"] == 60.0 and rows(built) == {
        "run_start": 10.0,
        "data": 5.0,
        "compute": 40.0,
        "unaccounted": 5.0,
    }
    assert built["cost_usd"] == pytest.approx(0.6)
    assert ledger.of_lost({}) is None and ledger.of_lost({ledger.SUBMITTED: "yesterday"}) is None
    assert ledger.of_lost({ledger.SUBMITTED: 0.0, "phases/0": {"seconds": {"compute": -1}}}) is None
