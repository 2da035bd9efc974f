"""Issue 54 R2 in a queued run's own wait (rayfleet/recipes/admission.py, rayfleet/recipes/run_queue_liveness.py):
an entry another job forged under queue/ never crashes the wait nor holds the run forever, and an entry counts
only while its run has a live Ray job."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from rayfleet.core import ray_start
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import ADMITTED, Entry, Queue
from rayfleet.recipes import admission
from rayfleet.recipes.run_queue_liveness import ALIVE_CHECK_S, ALIVE_RECHECK_S, Liveness

NOW = 1_000_000.0


class Clock:
    """The wait's clock; a wait still going after `most` sleeps is the bug (it would wait forever)."""

    def __init__(self, most: int = 20):
        self.now, self.sleeps, self.most = NOW, 0, most

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.sleeps > self.most:
            raise AssertionError("the run still waits behind an entry no live job wrote")
        self.now += seconds


def me() -> Entry:
    return Entry(run="me", priority=0, submitted_at=NOW - 5, workers=1, cpus_per_worker=1.0, submission_id="sub-me")


def forge(tmp_path, run: str, **fields) -> None:
    body = {"run": run, "priority": 9, "submitted_at": NOW - 100, "workers": 1, "cpus_per_worker": 1.0, **fields}
    (tmp_path / "queue").mkdir(exist_ok=True)
    (tmp_path / "queue" / f"{run}.json").write_text(json.dumps(body))


def wait(tmp_path, clock: Clock, alive=None) -> list[str]:
    queue, said = Queue(str(tmp_path), warn=lambda line: said.append(line)), []
    run_dir = RunDir(str(tmp_path / "runs"), "me")
    assert admission.wait_turn(queue, me(), run_dir, lambda e: True, clock, clock.sleep, alive=alive) is None
    return said


@pytest.mark.parametrize(
    "forged",
    [
        {"priority": "high", "heartbeat_at": NOW},  # crashed the sort of every reader: every queued job failed
        {"state": ADMITTED, "admitted_at": NOW + 1e9, "heartbeat_at": NOW},  # "placing its workers" forever
        {"state": ADMITTED, "admitted_at": 0, "heartbeat_at": NOW},  # no admission time: the same
        {"heartbeat_at": NOW + 1e9},  # never stale: first in line forever
    ],
)
def test_a_forged_entry_ahead_neither_crashes_nor_holds_the_wait(tmp_path, forged):
    forge(tmp_path, "forged", **forged)
    said = wait(tmp_path, Clock())
    assert len(said) == 1 and "forged.json ignored: " in said[0]


def test_a_fresh_entry_of_a_run_with_no_live_job_is_passed(tmp_path, capsys):
    """The entry looks like a live run's (refreshed, valid, priority 9), but no Ray job of that run is alive."""
    forge(tmp_path, "ghost", heartbeat_at=NOW)
    jobs = [{"submission_id": "sub-me", "status": "RUNNING", "metadata": {"rayfleet_run": "me"}}]
    said = wait(tmp_path, Clock(), alive=Liveness(list_jobs=lambda: jobs))
    assert said == [
        f"[rayfleet] queue: {tmp_path}/queue/ghost.json ignored: its run has no live Ray job or trainer task"
    ]
    jobs.append({"submission_id": "sub-ghost", "status": "PENDING", "metadata": {"rayfleet_run": "ghost"}})
    clock, run_dir = Clock(5), RunDir(str(tmp_path / "runs"), "me")
    with pytest.raises(AssertionError, match="still waits"):  # alive: it goes first, as its priority says
        admission.wait_turn(
            Queue(str(tmp_path)),
            me(),
            run_dir,
            lambda e: True,
            clock,
            clock.sleep,
            alive=Liveness(list_jobs=lambda: jobs),
        )


def test_the_job_list_is_read_again_soon_only_for_a_run_it_did_not_have(capsys):
    clock, reads, jobs = [0.0], [], [{"submission_id": "a-1", "status": "RUNNING", "metadata": {"rayfleet_run": "a"}}]

    def list_jobs():
        reads.append(clock[0])
        return list(jobs)

    said: list[str] = []
    alive = Liveness(said.append, list_jobs, lambda: clock[0])
    assert alive({"a"}).why_not("a", "a-1") is None and reads == [0.0]
    clock[0] = ALIVE_RECHECK_S
    alive({"a"})
    assert reads == [0.0]  # every name known: the list stands until ALIVE_CHECK_S
    jobs.append({"submission_id": "b-1", "status": "RUNNING", "metadata": {"rayfleet_run": "b"}})
    clock[0] = ALIVE_RECHECK_S + 0.5
    assert alive({"a", "b"}).why_not("b", "b-1") is None and reads == [0.0, ALIVE_RECHECK_S + 0.5]  # a new run
    clock[0] += ALIVE_RECHECK_S / 2
    assert alive({"a", "b", "forged"}).why_not("forged", "") is not None  # asked again at most every RECHECK
    assert len(reads) == 2
    clock[0] += ALIVE_CHECK_S

    def away():
        raise ConnectionError("head away")

    alive.list_jobs = away
    assert alive({"a"}) is None and alive({"a"}) is None  # not known: no fresh entry dropped on a guess
    assert said == ["queue: could not read Ray's job list (ConnectionError): counting every fresh entry"]


def test_the_jobs_priority_ceiling_comes_from_its_environment():
    spec = admission.spec("/q", me())
    assert admission.parse(spec, {"RAYFLEET_MAX_PRIORITY": "3"})[0].max_priority == 3
    assert admission.parse(spec, {})[0].max_priority == 9


def test_a_runs_own_entry_is_clamped_as_every_other_reader_sees_it(capsys):
    """With a ceiling of 3, a run of priority 9 that kept 9 for itself would see itself first while every other
    run sees it at 3: two runs would each place their workers first."""
    queue, entry = admission.parse(admission.spec("/q", replace(me(), priority=9)), {"RAYFLEET_MAX_PRIORITY": "3"})
    assert entry.priority == 3 and queue.max_priority == 3
    assert "priority 9 is above this deployment's highest (3)" in capsys.readouterr().out
    assert (
        admission.parse(admission.spec("/q", replace(me(), priority=2)), {"RAYFLEET_MAX_PRIORITY": "3"})[1].priority
        == 2
    )


def test_the_probes_driver_is_no_driver_of_the_submission(monkeypatch):
    """Ray's job list names one driver per submission (the last by the hex spelling of its job id, which flips
    at each 256th job): the admission's probe driver must not be one, or a hung run's marker (made by the
    training driver) would not match the job the control task sees. The submission's id reaches a driver in
    the job config Ray's supervisor sets (its metadata), which the probe's driver starts without."""
    import ray

    config = '{"runtime_env": {}, "metadata": {"job_submission_id": "raysubmit_abc"}}'
    seen = []
    monkeypatch.setenv(ray_start.JOB_CONFIG_VAR, config)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.append(os.environ.get(ray_start.JOB_CONFIG_VAR)))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    with admission.bare_driver():
        pass
    assert seen == [None] and os.environ[ray_start.JOB_CONFIG_VAR] == config
