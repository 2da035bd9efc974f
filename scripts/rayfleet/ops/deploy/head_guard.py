"""`deploy` never replaces the Ray head under a running job or a served application: the plan's changes to
the head, what the head runs now, and the refusal (exit 2) unless forced."""

from __future__ import annotations

from rayfleet.core import serve_kept as kept
from rayfleet.core.aws import Aws, ClusterNotFound
from rayfleet.core.errors import ConfigError
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops.deploy.files import OUTPUTS


class HeadBusy(ConfigError):
    """The plan would replace the Ray head while a job runs: refused before applying (exit 2), unless --force."""


def head_changes(plan: dict) -> list[str]:
    """What the saved plan (`terraform show -json`) does to the Ray head: its task definition replaced, or its
    service given another task definition or replaced (ECS then stops the head task, and every running job
    loses its cluster)."""
    found = []
    for change in plan.get("resource_changes", []):
        actions = change.get("change", {}).get("actions", [])
        if change.get("name") != "head" or actions in (["no-op"], ["read"], ["create"]):
            continue
        detail = change["change"]
        if change.get("type") == "aws_ecs_task_definition":
            found.append(f"{change['address']}: {'/'.join(actions)}")
        elif change.get("type") == "aws_ecs_service" and (
            "delete" in actions
            or (detail.get("after_unknown") or {}).get("task_definition")
            or (detail.get("before") or {}).get("task_definition") != (detail.get("after") or {}).get("task_definition")
        ):
            found.append(f"{change['address']}: {'/'.join(actions)} (task_definition)")
    return found


def running_jobs() -> list[str]:
    """The deployment's running jobs, from the saved outputs: trainer tasks, RUNNING run records, and the
    application `make serve` keeps (rayfleet/core/serve_kept.py): a restarted head gets it back, but it stops
    answering meanwhile."""
    if not OUTPUTS.exists():
        return []  # a first deploy: nothing can be running
    from rayfleet.ecs.tasks import running_tasks
    from rayfleet.ops.runs import s3_runs

    out = Outputs.load(OUTPUTS)
    try:
        trainers = running_tasks(Aws(out.region).client("ecs"), out)["trainer"]
    except ClusterNotFound:
        return []
    jobs = [f"{len(trainers)} trainer task(s)"] if trainers else []
    jobs += [f"run {r['run']}" for r in s3_runs(out) if r["state"] == "RUNNING"]
    serving = kept.kept(Aws(out.region).client("s3"), out.results_bucket)
    return jobs + ([f"serving run {serving['run']}"] if serving else [])


def refuse_head_replacement(plan: dict, force: bool) -> None:
    """make deploy never replaces the head under a running job or a served application unless forced (FORCE=1)."""
    changes = head_changes(plan)
    if not changes:
        return
    jobs = running_jobs()
    if not jobs:
        return
    what = f"this plan replaces the Ray head ({'; '.join(changes)}) while it runs {', '.join(jobs)}"
    if force:
        print(
            f"FORCE: {what.replace('this plan replaces', 'replacing')}; a job will fail (resubmit it to resume), "
            "an application stops answering until the new head has it again"
        )
        return
    raise HeadBusy(
        f"{what}: they would lose their cluster. Wait for the jobs, `rayfleet deploy stop` or `rayfleet serve down`, "
        "or "
        "`rayfleet deploy --force` (then resubmit a run under its name to resume from its last checkpoint)"
    )
