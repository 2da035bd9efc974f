"""run_job's resubmissions: the recipe's `retries`, and the one try more when Ray, not the recipe, failed the
job (its setup of only what rayfleet ships, the code zip; its job monitor's own RPC error after a head
replacement; Ray Train's controller failing on an error of its own). The jobs are stand-ins
for `_run_once`: each writes the record a real one would."""

from __future__ import annotations

from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import job
from rayfleet.recipes.jobs_api import JobOutcome
from rayfleet.recipes.schema import Recipe

SETUP = (
    "runtime_env setup failed: Failed to set up runtime environment.\nTraceback (most recent call last):\nOSError: x"
)


def attempts_of(monkeypatch, tmp_path, recipe: Recipe, ends: list[tuple[int, str]]) -> tuple[int, list[dict]]:
    run_dir = RunDir(str(tmp_path), "r")
    left = list(ends)

    def once(recipe, run_dir, **how):
        code, message = left.pop(0)
        run_dir.update(state="FAILED" if code else "SUCCEEDED", exit_code=code, message=message)
        return code, None

    monkeypatch.setattr(job, "_run_once", once)
    code = job.run_job(recipe, run_dir)
    assert not left, "run_job stopped before the stand-in jobs ran out"
    return code, run_dir.record()["attempts"]


def test_a_setup_failure_of_the_code_alone_is_submitted_once_more_outside_the_retries(monkeypatch, tmp_path, capsys):
    code, attempts = attempts_of(monkeypatch, tmp_path, Recipe(name="r", entrypoint="t.py"), [(1, SETUP), (0, "")])
    assert code == 0 and [a["state"] for a in attempts] == ["FAILED", "SUCCEEDED"]
    assert "Ray could not set up the job's code on the cluster" in capsys.readouterr().out


MONITOR = "Unexpected error occurred: RPC error: CANCELLED"  # what Ray 2.60's new head wrote in CI (ray#65025)


def test_a_job_failed_by_rays_own_job_monitor_is_submitted_once_more_and_only_once(monkeypatch, tmp_path, capsys):
    """Seen in CI: the head that took the job back after a replacement failed it on a transient RPC error of
    its own and killed the run's driver; the run is whole again only through a resubmission, which resumes."""
    recipe = Recipe(name="r", entrypoint="t.py", pip=["tabulate==0.9.0"])  # no matter what the recipe installs
    code, attempts = attempts_of(monkeypatch, tmp_path, recipe, [(1, MONITOR), (0, "")])
    assert code == 0 and [a["why"] for a in attempts] == [MONITOR, ""]
    assert "Ray's job monitor failed the job on an RPC error of its own" in capsys.readouterr().out
    code, attempts = attempts_of(monkeypatch, tmp_path / "b", recipe, [(1, MONITOR), (1, MONITOR)])
    assert code == 1 and len(attempts) == 2  # one such try in all, as for a setup failure
    code, attempts = attempts_of(monkeypatch, tmp_path / "c", recipe, [(1, "RPC error: CANCELLED in my code")])
    assert code == 1 and len(attempts) == 1  # the user's own message is the user's failure


# What the stopped-worker DDP runs of two CI runs ended with (the job's message, cut to its tail).
CONTROLLER_GCS = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
    "(PlacementGroupCleaner pid=528) Monitor thread did not exit within 12.00 seconds\n"
    "error: run r failed: ControllerError: Training failed due to controller error:\n"
    "There was timeout in removing the placement group of id eb0b23. It is probably because GCS server is dead "
    "or there's a high load there.\n"
)
CONTROLLER_S3 = (
    "Job entrypoint command failed with exit code 1, last available logs (truncated to 20,000 chars):\n"
    "error: run r failed: ControllerError: Training failed due to controller error:\n"
    "When initiating multiple part upload for key 'runs/r/checkpoint_manager_snapshot.json' in bucket 'b': AWS "
    "Error NETWORK_CONNECTION during CreateMultipartUpload operation: curlCode: 28, Timeout was reached\n"
)


def test_only_rays_placement_group_timeout_in_the_controller_is_submitted_once_more(monkeypatch, tmp_path, capsys):
    """Ray Train 2.60 retries none of its controller's own errors but start-up ones; of those, only the GCS's
    placement-group removal timeout earns one more submission. A snapshot write to S3 that timed out fails the run:
    its timeout is the storage settings' (rayfleet/core/run_dir.py), a fault to fix there, never to absorb."""
    recipe = Recipe(name="r", entrypoint="t.py")
    code, attempts = attempts_of(monkeypatch, tmp_path / "gcs", recipe, [(1, CONTROLLER_GCS), (0, "")])
    assert code == 0 and [a["state"] for a in attempts] == ["FAILED", "SUCCEEDED"]
    assert "timed out removing a placement group on the GCS" in capsys.readouterr().out
    code, attempts = attempts_of(monkeypatch, tmp_path / "s3", recipe, [(1, CONTROLLER_S3)])
    assert code == 1 and len(attempts) == 1  # not retried: it shows
    assert "submitting it once more" not in capsys.readouterr().out
    code, attempts = attempts_of(monkeypatch, tmp_path / "b", recipe, [(1, CONTROLLER_GCS), (1, CONTROLLER_GCS)])
    assert code == 1 and len(attempts) == 2  # one such try in all
    own = (
        "(TrainController) [FailurePolicy] RETRY\n"  # a start-up error Ray Train retried, then the run's own
        "Error: Training failed due to controller error:\nWorkerGroupStartupTimeoutError\n"
        "error: run r failed: WorkerGroupError: Training failed due to worker errors:\n[Rank 0] ValueError: x"
    )
    code, attempts = attempts_of(monkeypatch, tmp_path / "c", recipe, [(1, own)])
    assert code == 1 and len(attempts) == 1  # the training function's own failure is the run's


def test_a_second_setup_failure_fails_the_run_and_the_retries_still_count_in_full(monkeypatch, tmp_path):
    code, attempts = attempts_of(monkeypatch, tmp_path, Recipe(name="r", entrypoint="t.py"), [(1, SETUP), (1, SETUP)])
    assert code == 1 and len(attempts) == 2
    recipe = Recipe(name="r", entrypoint="t.py", retries=1)  # one setup retry, then the one retry it names
    code, attempts = attempts_of(monkeypatch, tmp_path / "b", recipe, [(1, SETUP), (1, "boom"), (0, "")])
    assert code == 0 and len(attempts) == 3


def test_a_setup_failure_with_the_recipes_own_packages_is_not_retried(monkeypatch, tmp_path):
    recipe = Recipe(name="r", entrypoint="t.py", pip=["tabulate==0.9.0"])
    code, attempts = attempts_of(monkeypatch, tmp_path, recipe, [(1, SETUP)])
    assert code == 1 and len(attempts) == 1


def test_a_job_that_printed_nothing_shows_rays_traceback_from_its_message():
    tail = JobOutcome("j", "FAILED", 1, message=SETUP).traceback_tail()
    assert tail == "Traceback (most recent call last):\nOSError: x"


def test_a_retry_keeps_its_place_in_the_queue_and_a_new_submission_starts_anew(tmp_path, monkeypatch):
    """The queue orders by submission time: the entry of a resubmission of the same submission (a retry, a
    trainer relaunched after its head was lost) carries the time it first queued."""
    import json

    times = iter([100.0, 200.0, 300.0])
    monkeypatch.setattr(job.time, "time", lambda: next(times))
    run_dir, recipe = RunDir(str(tmp_path), "r"), Recipe(name="r", entrypoint="t.py")

    def queued_at() -> float:
        spec = job._queued(recipe, run_dir, str(tmp_path / "q"))[1]
        return json.loads(spec)["entry"]["submitted_at"]

    run_dir.update(submission=1)
    assert queued_at() == 100.0 and queued_at() == 100.0  # its retry: the same place
    run_dir.update(submission=2)  # the name submitted again after the run ended
    assert queued_at() == 200.0


def test_the_head_lost_while_the_run_is_queued_keeps_it_queued_and_after_admission_fails_it(tmp_path, monkeypatch):
    """A connection to the head that breaks while the run waits in the queue (nothing of it ran) leaves the
    record QUEUED and says so (the ECS trainer then rejoins the replaced head: tests/unit/node/test_ray_node.py);
    once admitted, the same break fails the run as any lost submitter does."""
    import pytest

    run_dir, recipe = RunDir(str(tmp_path), "r"), Recipe(name="r", entrypoint="t.py")

    def head_goes(state):
        def submit_and_follow(recipe, run_dir, **how):
            run_dir.update(state=state)
            raise ConnectionError("Connection refused: the head's dashboard")

        return submit_and_follow

    monkeypatch.setattr(job, "_submit_and_follow", head_goes("QUEUED"))
    with pytest.raises(job.HeadLostWhileQueued, match="the head went away while the run waited in the queue"):
        job.run_job(recipe, run_dir)
    assert run_dir.record()["state"] == "QUEUED" and run_dir.record()["message"] == job.HEAD_LOST
    monkeypatch.setattr(job, "_submit_and_follow", head_goes("RUNNING"))
    with pytest.raises(ConnectionError):
        job.run_job(recipe, run_dir)
    assert run_dir.record()["state"] == "FAILED"
    assert run_dir.record()["message"].startswith(job.SUBMITTER_STOPPED)


def test_the_setup_retry_submits_the_same_code_as_another_ray_package(monkeypatch, tmp_path):
    """Ray names a package by its zip's hash: the retry's zip holds the same files and one marker more."""
    import zipfile

    code = tmp_path / "code.zip"
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("train.py", "print('hi')")
    run_dir, seen, ends = RunDir(str(tmp_path), "r"), [], [(1, SETUP), (0, "")]

    def once(recipe, run_dir, **how):
        seen.append(how["working_dir"])
        code_, message = ends.pop(0)
        run_dir.update(state="FAILED" if code_ else "SUCCEEDED", exit_code=code_, message=message)
        return code_, None

    monkeypatch.setattr(job, "_run_once", once)
    assert job.run_job(Recipe(name="r", entrypoint="t.py"), run_dir, working_dir=str(code)) == 0
    first, again = seen
    assert first == str(code) and again != first
    assert set(zipfile.ZipFile(again).namelist()) == {"train.py", ".rayfleet-resubmitted"}
