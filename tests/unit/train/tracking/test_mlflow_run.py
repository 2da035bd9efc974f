"""The MLflow run against MLflow's own file store (a tracking server behaves the same through the client)."""

import pytest

from rayfleet.core.run_dir import RunDir
from rayfleet.train.tracking import mlflow_run
from rayfleet.train.tracking.scalars import Scalars, Target


@pytest.fixture
def uri(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own switch for a file: store
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return (tmp_path / "mlruns").as_uri()


def client(uri):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def test_one_mlflow_run_per_rayfleet_run_also_when_it_resumes(tmp_path, uri):
    run_dir = RunDir(str(tmp_path / "runs"), "r1")
    first = mlflow_run.open_run(uri, "rayfleet", run_dir, {"epochs": 3, "lr": 0.001, "run_name": None})
    assert run_dir.record() == {"mlflow_run_id": first, "mlflow_tracking_uri": uri}
    mlflow_run.close_run(uri, first, False, None, "")  # the first attempt failed
    # Resubmitted with more epochs and a new key: the same run, RUNNING again; the first values stay.
    again = mlflow_run.open_run(uri, "rayfleet", run_dir, {"epochs": 4, "lr": 0.001, "seed": 7})
    assert again == first
    run = client(uri).get_run(first)
    assert run.info.status == "RUNNING" and run.info.run_name == "r1"
    assert run.data.params == {"epochs": "3", "lr": "0.001", "seed": "7"}
    assert run.data.tags["rayfleet.run_dir"] == run_dir.url
    experiment = client(uri).get_experiment_by_name("rayfleet")
    assert len(client(uri).search_runs([experiment.experiment_id])) == 1


def test_a_deleted_mlflow_run_or_another_server_gets_a_new_run(tmp_path, uri):
    run_dir = RunDir(str(tmp_path / "runs"), "r2")
    first = mlflow_run.open_run(uri, "rayfleet", run_dir, {})
    client(uri).delete_run(first)
    second = mlflow_run.open_run(uri, "rayfleet", run_dir, {})
    assert second != first and run_dir.record()["mlflow_run_id"] == second
    other = (tmp_path / "other").as_uri()
    assert mlflow_run.open_run(other, "rayfleet", run_dir, {}) != second


def test_scalars_reach_tensorboard_and_mlflow_and_the_model_is_the_artifact(tmp_path, uri):
    run_dir = RunDir(str(tmp_path / "runs"), "r3")
    target = Target.open(run_dir, tensorboard=True, mlflow_uri=uri, experiment="exp", config={"epochs": 2})
    scalars = Scalars(run_dir, target, purge_step=1)
    for step in (5, 10):
        scalars.log(step, {"train/loss": 1.0 / step, "test/accuracy": step / 20})
    scalars.close()
    model = tmp_path / "checkpoint_000002"
    model.mkdir()
    (model / "state.pt").write_bytes(b"weights")
    mlflow_run.close_run(uri, target.mlflow_run_id, True, model, "checkpoint_000002")
    history = client(uri).get_metric_history(target.mlflow_run_id, "test/accuracy")
    assert [(m.step, m.value) for m in history] == [(5, 0.25), (10, 0.5)]
    assert client(uri).get_run(target.mlflow_run_id).info.status == "FINISHED"
    listed = client(uri).list_artifacts(target.mlflow_run_id, "checkpoint_000002")
    assert [a.path for a in listed] == ["checkpoint_000002/state.pt"]
    assert (tmp_path / "runs" / "r3" / "tensorboard").is_dir()


def test_the_environment_names_the_server_and_without_one_there_is_no_mlflow(tmp_path, uri, monkeypatch):
    run_dir = RunDir(str(tmp_path / "runs"), "r4")
    assert Target.open(run_dir, True, None, "rayfleet", {}).mlflow_run_id is None
    assert run_dir.record() == {}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert Target.open(run_dir, True, None, "rayfleet", {}).mlflow_uri == uri


def test_a_tracking_server_that_stops_answering_costs_one_warning_not_the_run(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    target = Target(tensorboard=False, mlflow_uri="http://127.0.0.1:9", mlflow_run_id="abc")  # nothing listens
    scalars = Scalars(RunDir(str(tmp_path), "r5"), target, purge_step=None)
    scalars.log(1, {"x": 1.0})
    scalars.log(2, {"x": 2.0})
    assert capsys.readouterr().err.count("warning: MLflow stopped taking metrics") == 1


def test_only_mlflows_switches_are_forwarded_to_the_workers(monkeypatch):
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "secret")
    assert mlflow_run.worker_settings() == {"MLFLOW_ALLOW_FILE_STORE": "true"}
