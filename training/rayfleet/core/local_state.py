"""The operator's project folder and its local state folder, `.rayfleet/`: one base and one variable for every
process that reads or writes it (the verbs, the local cluster, a job's driver looking for that cluster).

The project is the nearest folder at or above the working directory that holds `.rayfleet/` or `infra/main.tf`
(a checkout, wherever in it a verb runs), else the working directory itself. The state folder is
$RAYFLEET_STATE_DIR, else `<project>/.rayfleet`. What lives there, each named by its one owner:

    outputs.json     the deployment's Terraform outputs (rayfleet deploy writes, every verb reads)
    cluster/         the local cluster's record, logs and run queue (rayfleet cluster up)
    tensorboard/     runs' event files synced from S3 (rayfleet runs tensorboard)
    serve/api_key    the local Serve gate's key (rayfleet serve)
    detached/        followers' logs of detached runs whose run folder is in S3
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

STATE_DIR_ENV = "RAYFLEET_STATE_DIR"
NAME = ".rayfleet"
PROJECT_MARKERS = (NAME, "infra/main.tf")


def project_dir(cwd: Path | None = None) -> Path:
    here = (cwd or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return folder
    return here


def state_dir(env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env[STATE_DIR_ENV]) if env.get(STATE_DIR_ENV) else project_dir(cwd) / NAME


def outputs_file(env: Mapping[str, str] | None = None) -> Path:
    """The deployment's outputs: $RAYFLEET_OUTPUTS, else outputs.json in the state folder."""
    env = os.environ if env is None else env
    return Path(env["RAYFLEET_OUTPUTS"]) if env.get("RAYFLEET_OUTPUTS") else state_dir(env) / "outputs.json"


def cluster_dir(env: Mapping[str, str] | None = None) -> Path:
    return state_dir(env) / "cluster"


def cluster_state_file(env: Mapping[str, str] | None = None) -> Path:
    """The local cluster's record: its address, its processes, its spec (rayfleet/local/cluster.py writes it)."""
    return cluster_dir(env) / "state.json"
