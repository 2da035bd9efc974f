"""One attempt of a run at a time: before a run is submitted again under its name, every process of its previous
attempt that could still write the run's storage has ended.

Why: when a job fails, Ray stops its driver at once, but the driver's actors (Ray Train's controller, and the
training workers the controller owns) end only when the GCS has handled the driver's death: on a head that
was just replaced, seconds to minutes later. An attempt submitted in that window resumes from the checkpoint
the old controller's snapshot names while the old controller goes on registering newer checkpoints and
deleting the oldest (CheckpointConfig.num_to_keep): the new attempt's ranks then download a checkpoint whose
files are gone (on S3, an empty folder: `FileNotFoundError .../state.pt` on every rank), and two attempts
write one folder. Ray does not wait for this itself; the Jobs API reports the job FAILED as soon as its
driver is gone.

Detached actors are not waited for: they outlive their job by design (a recipe may start one on purpose)."""

from __future__ import annotations

import time
from collections.abc import Callable

from rayfleet.core.errors import RayfleetError
from rayfleet.core.run_dir import RunDir
from rayfleet.recipes import jobs_api

GONE_WAIT_S = 180.0  # what a replaced head's GCS took, at most, to end a failed driver's actors on the CI host
POLL_S = 1.0


class AttemptStillAlive(RayfleetError):
    """The previous attempt's actors did not end in time: a new attempt would share its run storage with them."""


def ray_job_of(client, submission_id: str) -> str | None:
    """The Ray job id (hex) of a Jobs API submission; None when the head does not know it (a head replaced
    without a GCS store forgot it, and its processes went with the old head) or its driver never started."""
    try:
        return client.get_job_info(submission_id).job_id
    except RuntimeError:  # the SDK's answer for an id the head does not know; a head that does not answer raises
        return None


def live_actors(address: str, ray_job: str) -> list[str]:
    """The job's actors that are not DEAD and not detached, as `Class(pid)`; Ray's state API on the dashboard."""
    from ray.util.state import list_actors

    found = list_actors(
        address=address,
        filters=[("job_id", "=", ray_job), ("state", "!=", "DEAD")],
        detail=True,
        raise_on_missing_output=False,
    )
    return sorted(f"{a.class_name}({a.pid})" for a in found if not a.is_detached)


def wait_gone(
    run: str,
    ray_job: str | None,
    lister: Callable[[str], list[str]],
    *,
    timeout_s: float = GONE_WAIT_S,
    poll_s: float = POLL_S,
    echo: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait until `lister(ray_job)` names no live actor; the seconds waited. One line when it must wait; at
    `timeout_s` AttemptStillAlive, which ends the run instead of letting two attempts write one folder."""
    if ray_job is None:
        return 0.0
    start = clock()
    alive = _look(lister, ray_job)
    if not alive:
        return 0.0
    echo(
        f"[rayfleet] run {run}: waiting for the previous attempt's {len(alive)} actor(s) to end "
        f"({', '.join(alive[:4])}) before submitting it again"
    )
    while alive:
        if clock() - start >= timeout_s:
            raise AttemptStillAlive(
                f"run {run}: the previous attempt's actors {', '.join(alive[:4])} (Ray job {ray_job}) still run "
                f"{timeout_s:.0f} s after it failed; not submitting it again, since both would write its checkpoints "
                f"(stop them, then `rayfleet run` it again under the same name)"
            )
        sleep(poll_s)
        alive = _look(lister, ray_job)
    return round(clock() - start, 1)


def _look(lister: Callable[[str], list[str]], ray_job: str) -> list[str]:
    """The live actors, or one line standing for them while the state API does not answer (a head that is
    starting): not knowing is waited out like knowing, never taken for gone."""
    try:
        return lister(ray_job)
    except Exception as exc:  # the state API's errors are many (HTTP, RPC, timeouts)
        return [f"unknown: the state API did not answer ({type(exc).__name__})"]


def fence(run_dir: RunDir, address: str | None) -> None:
    """Wait until the previous job's actors, if the run name had one, have ended; what it waited goes in the
    record (rayfleet/recipes/job.py calls this before every submission)."""
    previous = run_dir.record().get("job_id")
    if not previous or not address:
        return
    ray_job = ray_job_of(jobs_api.client_for(address), previous)
    waited = wait_gone(run_dir.run_name, ray_job, lambda job: live_actors(address, job), echo=_say)
    run_dir.update(previous_attempt_gone_after_s=waited)


def _say(line: str) -> None:
    print(line, flush=True)
