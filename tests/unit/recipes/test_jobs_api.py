"""Jobs API outcomes: exit codes, the traceback tail, and a follower that outlives a replaced head and loses
no line written after its stream's last look."""

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
    stream breaks, the API refuses connections for two polls, then a new head on the same store answers with
    the job still running and streams its log from the start, as Ray does. Its last line is written after
    the stream's last look: only the log read again to its end (in chunks, never whole) has it."""

    def __init__(self):
        self.streams, self.refusals, self.stopped, self.ended, self.reads_to_the_end = 0, 2, False, False, 0
        self.log = ["step 1\n", "step 2\nst", "ep 3\nstep 4\n"]  # in chunks that split lines
        self.before_log = 1  # the first stream is refused once: the supervisor has not opened the log yet

    async def log_stream(self, job_id, node_id, follow):
        import asyncio

        from rayfleet.recipes.jobs_api import NotYet

        assert node_id == "n1"
        if not follow:  # the log read again, to its end, once the job has ended
            self.reads_to_the_end += 1
            for line in self.log:
                yield line
            return
        if self.before_log:
            self.before_log -= 1
            raise NotYet("the log stream answered 500: no such file")
        self.streams += 1
        yield "step 1\nstep 2\n"
        if self.streams == 1:
            raise ConnectionError("the head died: the stream breaks")
        yield "step 3\n"
        self.ended = True
        await asyncio.Event().wait()  # Ray's stream never ends by itself

    def get_job_info(self, job_id):
        from types import SimpleNamespace

        from requests.exceptions import ConnectionError

        if self.streams == 1 and self.refusals:
            self.refusals -= 1
            raise ConnectionError("Connection refused")
        status = "SUCCEEDED" if self.ended else "RUNNING"
        return SimpleNamespace(
            status=status, driver_exit_code=0 if self.ended else None, message="", driver_node_id="n1"
        )

    def get_job_logs(self, job_id):
        raise AssertionError("the whole log in memory: the follower reads it to its end in chunks")

    def stop_job(self, job_id):
        self.stopped = True


def test_a_follower_waits_out_a_replaced_head_and_shows_each_line_once():
    from rayfleet.recipes.jobs_api import follow

    client, out = HeadReplacedClient(), []
    outcome = follow(client, "j", echo=out.append, poll_s=0.01, stream=client.log_stream)
    text = "".join(out)
    assert outcome.status == "SUCCEEDED" and outcome.exit_code == 0 and not client.stopped
    assert client.streams == 2 and client.refusals == 0 and client.before_log == 0 and client.reads_to_the_end == 1
    assert [line for line in text.splitlines() if line.startswith("step")] == ["step 1", "step 2", "step 3", "step 4"]
    assert text.count("the head's Jobs API does not answer (ConnectionError); waiting for it") == 1
    assert text.count("log stream interrupted") == 1  # the head's death, not the log not there yet
    assert "".join(outcome.log) == "step 1\nstep 2\nstep 3\nstep 4\n"


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
