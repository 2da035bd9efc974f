"""The warm-worker contract: which environment differences send a worker to a fresh process."""

from __future__ import annotations

from rayfleet.core import warm_workers

SERVER = {"HOME": "/root", "PATH": "/venv/bin", "PYTHONPATH": "/repo", "LANG": "C.UTF-8"}


def test_the_same_environment_forks():
    assert warm_workers.import_time_differences(SERVER, dict(SERVER)) == []


def test_a_variable_a_preloaded_module_reads_at_import_sends_the_worker_to_a_fresh_process():
    wanted = {**SERVER, "TORCH_LOGS": "+dynamo", "CUDA_VISIBLE_DEVICES": "1", "LANG": "de_DE.UTF-8"}
    assert warm_workers.import_time_differences(SERVER, wanted) == ["CUDA_VISIBLE_DEVICES", "LANG", "TORCH_LOGS"]
    removed = {k: v for k, v in SERVER.items() if k != "HOME"}
    assert warm_workers.import_time_differences(SERVER, removed) == ["HOME"]


def test_what_the_fork_rebuilds_or_nothing_preloaded_reads_may_differ():
    wanted = {
        **SERVER,
        "PYTHONPATH": "/job/working_dir:/repo",  # sys.path is rebuilt from it
        "PYTHONBREAKPOINT": "ray.util.rpdb.set_trace",  # read at each breakpoint()
        "OMP_NUM_THREADS": "1",  # given to torch in the fork
        "RAY_JOB_ID": "01000000",  # Ray is never preloaded: the worker imports it with its own environment
        "RAYFLEET_RUN_NAME": "r1",
        "MLFLOW_TRACKING_URI": "file:/x",
    }
    assert warm_workers.import_time_differences(SERVER, wanted) == []


def test_a_thread_count_only_the_server_has_cannot_be_undone():
    server = {**SERVER, "OMP_NUM_THREADS": "4"}
    assert warm_workers.import_time_differences(server, SERVER) == ["OMP_NUM_THREADS"]


def test_jobs_name_the_launcher_as_their_workers_python():
    assert warm_workers.runtime_env() == {"py_executable": "python -m rayfleet.node.warm_client"}
    assert warm_workers.NEVER_PRELOADED not in warm_workers.DEFAULT_PRELOAD


def test_a_python_driver_runs_through_the_launcher_anything_else_as_it_is():
    launcher = ["-m", "rayfleet.node.warm_client"]
    assert warm_workers.launched(["/venv/bin/python", "-m", "rayfleet.train.ddp", "epochs=1"]) == [
        "/venv/bin/python",
        *launcher,
        "-m",
        "rayfleet.train.ddp",
        "epochs=1",
    ]
    assert warm_workers.launched(["python3", "train.py"]) == ["python3", *launcher, "train.py"]
    for command in (["python", "-c", "print(1)"], ["python"], ["torchrun", "train.py"], []):
        assert warm_workers.launched(command) == command
