"""The exact attempts a run made, as its run.json lists them (rayfleet/recipes/job.py's `attempts`), for the
tests of runs submitted through the Jobs API.

rayfleet submits a run once more on some faults of Ray's own (rayfleet/recipes/ray_faults.py); a test that
only looks at the run's end would pass over such a resubmission unseen. Each test says how its attempts ended,
in order, and names the Ray faults it allows: an attempt followed by a resubmission for one of those is left
out of the comparison; any other resubmission, or a count that differs, fails the test."""

from __future__ import annotations

from rayfleet.recipes import ray_faults

# Ray losing the job's code package on a node (its working_dir cache), seen on a loaded 2-core CI host: the
# fault the Jobs API runs of the local-cluster tier allow, each by naming it.
RAY_LOST_THE_CODE = (ray_faults.SETUP_FAULT,)


def resubmitted_for(attempt: dict) -> str | None:
    """The Ray fault this attempt was submitted for, or None (a first submission, a retry the recipe asked for,
    a submission of the run's name again)."""
    reason = attempt.get("reason", "")
    faults = (ray_faults.SETUP_FAULT, ray_faults.MONITOR_FAULT, ray_faults.CONTROLLER_FAULT)
    return next((fault for fault in faults if reason.startswith(fault)), None)


def check_attempts(record: dict, expected: list[tuple[str, int | None]], allowing: tuple[str, ...] = ()) -> None:
    """run.json's `attempts`, as (state, exit_code) each, equal `expected` once the attempts that Ray faults in
    `allowing` ended are left out."""
    attempts = record.get("attempts") or []
    kept = []
    for number, attempt in enumerate(attempts):
        after = attempts[number + 1] if number + 1 < len(attempts) else {}
        fault = resubmitted_for(after)
        if fault is not None and fault in allowing:
            continue
        assert fault is None, f"attempt {number + 2} was a resubmission the test does not allow: {after}"
        kept.append((attempt.get("state"), attempt.get("exit_code")))
    assert kept == expected, attempts
