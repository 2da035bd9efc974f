"""The rayfleet run's one MLflow run, when a tracking URI is set (config `mlflow_tracking_uri`, else
$MLFLOW_TRACKING_URI, read by the driver).

The driver opens it before the workers start and writes its id into run.json (`mlflow_run_id`): a resumed
or resubmitted run of the same name gets the same MLflow run back, and Ray Train's worker-group restarts
use the driver's id, so there is never a duplicate. Rank 0 logs the scalars (scalars.py); the driver logs
the final checkpoint or export as an artifact and closes the run FINISHED or FAILED.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rayfleet.core.run_dir import RunDir

# MLflow switches (never credentials) that the workers need to behave as the driver does: a file: store is
# refused unless MLFLOW_ALLOW_FILE_STORE is set, and the workers' processes were started before this job.
# Credentials for a tracking server reach the workers from their own environment, never through Ray.
FORWARDED = ("MLFLOW_ALLOW_FILE_STORE",)


def worker_settings() -> dict[str, str]:
    return {name: os.environ[name] for name in FORWARDED if name in os.environ}


def _client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _params(config: dict) -> dict[str, str]:
    return {key: str(value)[:6000] for key, value in config.items() if value is not None}  # MLflow's limit


def open_run(uri: str, experiment: str, run_dir: RunDir, config: dict) -> str:
    """The MLflow run id for this run directory: the one run.json names if MLflow still has it, else new."""
    client = _client(uri)
    known = run_dir.record().get("mlflow_run_id")
    if known and run_dir.record().get("mlflow_tracking_uri") == uri and _exists(client, known):
        logged = client.get_run(known).data.params
        # A param cannot change once logged; a resume may change some (epochs=4): keep the first values.
        _log_params(client, known, {k: v for k, v in _params(config).items() if k not in logged})
        client.update_run(known, status="RUNNING")
        return known
    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(experiment_id, run_name=run_dir.run_name, tags={"rayfleet.run_dir": run_dir.url})
    _log_params(client, run.info.run_id, _params(config))
    run_dir.send("mlflow", mlflow_run_id=run.info.run_id, mlflow_tracking_uri=uri)  # the job is not the owner
    return run.info.run_id


def _exists(client, run_id: str) -> bool:
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).info.lifecycle_stage == "active"
    except MlflowException:
        return False


def _log_params(client, run_id: str, params: dict[str, str]) -> None:
    from mlflow.entities import Param

    items = [Param(key, value) for key, value in params.items()]
    for start in range(0, len(items), 100):  # MLflow's batch limit
        client.log_batch(run_id, params=items[start : start + 100])


def log_metrics(uri: str, run_id: str, step: int, values: dict[str, float]) -> None:
    from mlflow.entities import Metric

    stamp = int(time.time() * 1000)
    _client(uri).log_batch(run_id, metrics=[Metric(key, float(v), stamp, step) for key, v in values.items()])


def close_run(uri: str, run_id: str, succeeded: bool, artifact: Path | None, artifact_name: str) -> None:
    client = _client(uri)
    if artifact is not None:
        client.log_artifacts(run_id, str(artifact), artifact_name)
    client.set_terminated(run_id, "FINISHED" if succeeded else "FAILED")
