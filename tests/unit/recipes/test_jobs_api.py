"""Jobs API outcomes: exit codes, the traceback tail, and a follower that outlives a replaced head."""

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


class HeadReplacedClient:
    """The Jobs API of a head that is SIGKILLed once while the job runs (Ray's own client shapes): the log
    stream ends, the API refuses connections for two polls, then a new head on the same store answers with
    the job still running and streams its log from the start, as Ray does."""

    def __init__(self):
        self.streams, self.refusals, self.stopped = 0, 2, False

    async def tail_job_logs(self, job_id):
        self.streams += 1
        yield "step 1\nstep 2\n"
        if self.streams == 1:
            return  # the head died: the websocket closes
        yield "step 3\n"

    def get_job_info(self, job_id):
        from types import SimpleNamespace

        from requests.exceptions import ConnectionError

        if self.streams == 1 and self.refusals:
            self.refusals -= 1
            raise ConnectionError("Connection refused")
        status = "RUNNING" if self.streams == 1 else "SUCCEEDED"
        return SimpleNamespace(status=status, driver_exit_code=0 if status == "SUCCEEDED" else None, message="")

    def stop_job(self, job_id):
        self.stopped = True


def test_a_follower_waits_out_a_replaced_head_and_shows_each_line_once():
    from rayfleet.recipes.jobs_api import follow

    client, out = HeadReplacedClient(), []
    outcome = follow(client, "j", echo=out.append, poll_s=0.01)
    text = "".join(out)
    assert outcome.status == "SUCCEEDED" and outcome.exit_code == 0 and not client.stopped
    assert client.streams == 2 and client.refusals == 0
    assert [line for line in text.splitlines() if line.startswith("step")] == ["step 1", "step 2", "step 3"]
    assert text.count("the head's Jobs API does not answer (ConnectionError); waiting for it") == 1
    assert "".join(outcome.log) == "step 1\nstep 2\nstep 3\n"


def test_a_follower_gives_up_on_a_head_that_never_comes_back_and_not_on_an_error():
    import pytest
    from requests.exceptions import ConnectionError

    from rayfleet.recipes.jobs_api import job_info

    class Gone:
        def get_job_info(self, job_id):
            raise ConnectionError("Connection refused")

    class Wrong:
        def get_job_info(self, job_id):
            raise RuntimeError("Request failed with status code 404: Job j does not exist.")

    with pytest.raises(ConnectionError):
        job_info(Gone(), "j", echo=lambda text: None, away_s=0.05, poll_s=0.01)
    with pytest.raises(RuntimeError, match="404"):
        job_info(Wrong(), "j", echo=lambda text: None, away_s=60, poll_s=0.01)
