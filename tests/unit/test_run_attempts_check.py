"""The local-cluster tier's attempt check (tests/integration/run_attempts.py) fails on a resubmission the test
did not name, and leaves out only the attempt a named Ray fault ended."""

from __future__ import annotations

import pytest

from rayfleet.recipes import ray_faults
from tests.integration.run_attempts import check_attempts

FIRST = {"attempt": 1, "reason": "submitted", "state": "FAILED", "exit_code": 1}


def again(fault: str) -> dict:
    return {"attempt": 2, "reason": f"{fault}: submitted once more under the same run name", "state": "SUCCEEDED"}


def test_a_resubmission_for_a_ray_fault_fails_unless_the_test_names_that_fault():
    record = {"attempts": [FIRST, {**again(ray_faults.CONTROLLER_FAULT), "exit_code": 0}]}
    with pytest.raises(AssertionError, match="resubmission the test does not allow"):
        check_attempts(record, [("SUCCEEDED", 0)])
    with pytest.raises(AssertionError, match="resubmission the test does not allow"):
        check_attempts(record, [("SUCCEEDED", 0)], allowing=(ray_faults.SETUP_FAULT,))
    check_attempts(record, [("SUCCEEDED", 0)], allowing=(ray_faults.CONTROLLER_FAULT,))


def test_the_count_and_the_ends_are_exact():
    record = {"attempts": [{**FIRST, "state": "SUCCEEDED", "exit_code": 0}]}
    check_attempts(record, [("SUCCEEDED", 0)])
    with pytest.raises(AssertionError):
        check_attempts(record, [])
    with pytest.raises(AssertionError):
        check_attempts({"attempts": [FIRST, {**FIRST, "attempt": 2}]}, [("FAILED", 1)])
