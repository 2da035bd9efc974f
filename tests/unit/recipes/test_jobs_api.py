"""Jobs API outcomes: exit codes and the traceback tail."""

from __future__ import annotations


def test_job_outcome_exit_codes_and_traceback_tail():
    from rayfleet.recipes.jobs_api import JobOutcome, exit_code_of

    assert exit_code_of("SUCCEEDED", None) == 0 and exit_code_of("FAILED", 3) == 3
    assert exit_code_of("FAILED", None) == 1 and exit_code_of("STOPPED", None) == 130
    log = [
        "step 1\n",
        "Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n",
        "retrying\nTraceback (most recent call last):\n",
        '  File "b.py", line 9, in main\nValueError: bad\n',
    ]
    tail = JobOutcome("j", "FAILED", 1, log=log).traceback_tail()
    assert tail.startswith("Traceback") and tail.endswith("ValueError: bad") and "KeyError" not in tail
    assert JobOutcome("j", "FAILED", 1, log=["no traceback here\n"]).traceback_tail() == "no traceback here"
