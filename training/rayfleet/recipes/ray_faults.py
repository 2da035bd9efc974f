"""Faults of Ray's, not of the recipe, that earn a run one more submission (rayfleet/recipes/job.py's
`run_job`, once and outside the recipe's `retries`)."""

from __future__ import annotations

import shutil
import uuid
import zipfile
from pathlib import Path

from rayfleet.recipes import jobs_api
from rayfleet.recipes.schema import Recipe

SETUP_FAULT = "Ray could not set up the job's code on the cluster (its traceback is above)"
MONITOR_FAULT = "Ray's job monitor failed the job on an RPC error of its own, not the run's (ray-project/ray#65025)"
CONTROLLER_FAULT = "Ray Train's controller timed out removing a placement group on the GCS, an error of Ray's own"

# How the job's last error names Ray Train's wrapper of a failure in its controller, never of the training
# function's, which fails as "Training failed due to worker errors". With the class name: the controller's own
# log of a start-up error it retried has the words without it.
CONTROLLER_FAILED = "ControllerError: Training failed due to controller error"
# ... and the one controller error retried: Ray's own GCS call (ray/util/placement_group.py's removal wait).
PLACEMENT_GROUP_TIMEOUT = "There was timeout in removing the placement group"


def fault(recipe: Recipe, record: dict) -> str | None:
    """Why Ray, not the recipe, failed this attempt, if it did; worth one more submission:
    - the job's environment failed while it held only what rayfleet ships (the code zip, variables), seen on a
      loaded 2-core CI host. With `pip` the recipe's own packages may be what failed, and that fails again;
    - the job monitor of a head that took the job back after a replacement got a transient RPC error, marked
      the job FAILED and killed its supervisor with the run's driver (Ray 2.60 does not retry it);
    - Ray Train's controller timed out removing a lost node's placement group on the GCS (seen on the loaded
      2-core CI host after a worker task was stopped). Ray Train 2.60 retries only its start-up errors and
      documents no recovery for this one, though a restart resumes the run.
    Nothing else is retried here: any other controller error (its snapshot write to storage failing, say) fails
    the run, so a fault of rayfleet's own settings shows instead of passing as a resubmission."""
    message = str(record.get("message", ""))
    if not recipe.pip and message.startswith(jobs_api.SETUP_FAILED):
        return SETUP_FAULT
    if message.startswith(jobs_api.MONITOR_RPC_FAILED):
        return MONITOR_FAULT
    if CONTROLLER_FAILED in message and PLACEMENT_GROUP_TIMEOUT in message:
        return CONTROLLER_FAULT
    return None


def repackaged(working_dir: str) -> str:
    """The same code under a new Ray package: a copy of the zip with one more entry, so Ray hashes it to another
    URI. What failed is Ray's copy of the package on a node (its cache of unpacked packages races its own
    garbage collection when runs of the same code follow each other); the same URI fails the same way."""
    path = Path(working_dir)
    if path.suffix != ".zip" or not path.is_file():
        return working_dir
    copy = path.with_name(f"{path.stem}-again.zip")
    shutil.copyfile(path, copy)
    with zipfile.ZipFile(copy, "a") as archive:
        archive.writestr(".rayfleet-resubmitted", uuid.uuid4().hex)
    return str(copy)
