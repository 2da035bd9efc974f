"""A run is submitted again only once its previous attempt's actors have ended (rayfleet/recipes/attempt_fence.py):
two attempts of one run name would otherwise write one checkpoint folder, and the old one's retention delete
the checkpoint the new one resumes from."""

from __future__ import annotations

import itertools

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import attempt_fence, job
from rayfleet.recipes.schema import Recipe


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_waits_until_the_previous_attempts_actors_are_gone_and_says_so_once():
    clock, lines = Clock(), []
    looks = iter([["TrainController(7)", "RayTrainWorker(8)"], ["RayTrainWorker(8)"], []])
    waited = attempt_fence.wait_gone(
        "r", "02000000", lambda job: next(looks), echo=lines.append, clock=clock, sleep=clock.sleep
    )
    assert waited == 2.0 and len(lines) == 1
    assert "waiting for the previous attempt's 2 actor(s) to end (TrainController(7), RayTrainWorker(8))" in lines[0]


def test_nothing_to_wait_for_when_the_head_does_not_know_the_job_or_its_actors_are_dead():
    def never(job):
        raise AssertionError("no Ray job: nothing to ask")

    assert attempt_fence.wait_gone("r", None, never) == 0.0
    lines = []
    assert attempt_fence.wait_gone("r", "02000000", lambda job: [], echo=lines.append) == 0.0 and lines == []


def test_actors_that_outlive_the_deadline_end_the_run_instead_of_a_second_writer():
    clock = Clock()
    with pytest.raises(attempt_fence.AttemptStillAlive, match=r"TrainController\(7\).*not submitting it again"):
        attempt_fence.wait_gone(
            "r",
            "02",
            lambda job: ["TrainController(7)"],
            timeout_s=30,
            echo=lambda line: None,
            clock=clock,
            sleep=clock.sleep,
        )
    assert clock.now == 30


def test_a_state_api_that_does_not_answer_is_waited_out_never_taken_for_gone():
    clock, answers = Clock(), itertools.chain([ConnectionError("starting")] * 3, [[]])

    def lister(job):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert attempt_fence.wait_gone("r", "02", lister, echo=lambda line: None, clock=clock, sleep=clock.sleep) == 3.0


def test_run_job_submits_again_only_after_the_fence(monkeypatch, tmp_path):
    """The order run_job keeps: attempt 1 ends, its actors are looked up until none is left, attempt 2 starts."""
    run_dir, events = RunDir(str(tmp_path), "r"), []
    ends = [(1, "Unexpected error occurred: RPC error: CANCELLED"), (0, "")]

    def once(recipe, run_dir, **how):
        events.append("submit")
        code, message = ends.pop(0)
        run_dir.update(
            job_id=f"rayfleet-r-{len(events)}", state="FAILED" if code else "SUCCEEDED", exit_code=code, message=message
        )
        return code, None

    class Client:
        def get_job_info(self, submission_id):
            events.append(f"info {submission_id}")
            return type("Info", (), {"job_id": "03000000"})()

    alive = iter([["TrainController(7)"], []])
    monkeypatch.setattr(job, "_run_once", once)
    monkeypatch.setattr(job.jobs_api, "client_for", lambda address: Client())
    monkeypatch.setattr(job.attempt_fence, "live_actors", lambda address, ray_job: events.append("look") or next(alive))
    monkeypatch.setattr(job.attempt_fence.time, "sleep", lambda s: None)
    assert job.run_job(Recipe(name="r", entrypoint="t.py"), run_dir, address="http://127.0.0.1:8265") == 0
    assert events == ["submit", "info rayfleet-r-1", "look", "look", "submit"]
    assert run_dir.record()["previous_attempt_gone_after_s"] >= 0
