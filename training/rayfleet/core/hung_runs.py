"""How a hung run shows itself to the control task beside the head, which reads Ray only through the head's
dashboard (rayfleet/node/control/head_snapshot.py): while the hang watchdog holds a hang verdict for a run
(rayfleet/train/control/hang_watch.py), an actor of no resources named `marker(run)` is alive; autostop does not count
that run as work (rayfleet/node/control/autostop.py).

Any job can name an actor `rayfleet-hung-<anything>`, so a marker is taken at its word only for the job that
created it: Ray records each actor's job (its `job_id`, which the job cannot choose), and a marker counts only
for the unfinished job of that very id, and, when that job names its run (a recipe's submission:
metadata `rayfleet_run`), only under that run's name. A job can so make itself look idle, never another job:
a busy cluster cannot be made to look idle by a name.
"""

from __future__ import annotations

from rayfleet.core.run_name import valid

PREFIX = "rayfleet-hung-"
MOST = 100  # markers kept from one snapshot: more is not a watchdog's doing, and the snapshot stays small
RUN_KEY = "rayfleet_run"  # the run a recipe's Ray job names in its metadata (rayfleet/recipes/job.py)


def marker(run_name: str) -> str:
    return f"{PREFIX}{run_name}"


def markers(actors: list[dict]) -> list[dict]:
    """The hung markers among alive actors (the State API's rows): [{"run", "job_id"}], only those with a
    valid run name and a job id, at most MOST."""
    found = []
    for actor in actors:
        name, job_id = actor.get("name"), actor.get("job_id")
        if not isinstance(name, str) or not name.startswith(PREFIX) or not isinstance(job_id, str) or not job_id:
            continue
        run = name.removeprefix(PREFIX)
        if valid(run):
            found.append({"run": run, "job_id": job_id[:64]})
        if len(found) >= MOST:
            break
    return sorted(found, key=lambda m: (m["run"], m["job_id"]))


def held(found: list[dict], jobs: list[dict]) -> list[dict]:
    """The markers that hold a job of `jobs` hung, one per job ({"run", "job_id"}): made by the job itself (the
    same job id) and, when the job names its run, named after that run. Markers of no such job are ignored."""
    by_job: dict[str, set[str]] = {}
    for mark in found or []:
        if isinstance(mark, dict) and isinstance(mark.get("job_id"), str) and isinstance(mark.get("run"), str):
            by_job.setdefault(mark["job_id"], set()).add(mark["run"])
    hung = []
    for job in jobs:
        job_id = job.get("job_id")
        runs = by_job.get(job_id) if isinstance(job_id, str) else None
        if not runs:
            continue
        metadata = job.get("metadata") if isinstance(job.get("metadata"), dict) else {}
        named = metadata.get(RUN_KEY)
        if named is None:
            hung.append({"run": min(runs), "job_id": job_id})
        elif named in runs:
            hung.append({"run": named, "job_id": job_id})
    return hung
