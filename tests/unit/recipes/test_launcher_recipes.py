"""Launcher recipes (`launcher: torchrun | accelerate`): validation, the job's command, each node's launcher."""

from __future__ import annotations

import shlex

import pytest

from rayfleet.core.config import ConfigError
from rayfleet.node.driver.launch_line import Shape, launcher_argv, launcher_env
from rayfleet.node.driver.multinode import parse
from rayfleet.recipes.command import command, job_env
from rayfleet.recipes.fit import Capacity, check_fits
from rayfleet.recipes.schema import load
from tests.unit.recipes.helpers import GOOD, write

TORCHRUN = {**GOOD, "launcher": "torchrun"}
ACCELERATE = {**GOOD, "launcher": "accelerate", "launcher_args": ["--mixed_precision=no"]}


@pytest.mark.parametrize(
    ("recipe", "expected"),
    [
        ({**GOOD, "launcher": "deepspeed"}, "launcher: Input should be 'torchrun' or 'accelerate'"),
        ({**TORCHRUN, "entrypoint": "torchrun train.py"}, "name the script (train.py) or module"),
        ({**TORCHRUN, "launcher_args": ["--nnodes=4"]}, "--nnodes is set by rayfleet"),
        ({**TORCHRUN, "launcher_args": ["--master_port=1"]}, "--master_port is set by rayfleet"),
        ({**TORCHRUN, "launcher_args": ["--no-such-flag"]}, "torchrun has no option --no-such-flag"),
        ({**TORCHRUN, "launcher_args": ["--max-restarts=x"]}, "launcher_args: torchrun: argument --max-restarts"),
        ({**ACCELERATE, "launcher_args": ["--num_processes=8"]}, "--num_processes is set by rayfleet"),
        ({**ACCELERATE, "launcher_args": []}, "accelerate needs its config: --config_file"),
        ({**ACCELERATE, "launcher_args": ["--config_file=no.yaml"]}, "--config_file no.yaml is not a file"),
        ({**GOOD, "launcher_args": ["--max-restarts=1"]}, "launcher_args: only with a launcher"),
        ({**GOOD, "max_restarts": 2}, "max_restarts: only with a launcher"),
        ({**TORCHRUN, "max_restarts": -1}, "max_restarts: Input should be greater than or equal to 0"),
        ({**TORCHRUN, "entrypoint": "gone.py"}, "entrypoint: gone.py is not a file"),
    ],
)
def test_bad_launcher_recipes_are_one_clear_error(tmp_path, recipe, expected):
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, recipe))
    assert expected in str(err.value)
    assert str(err.value).count("\n  ") == 1


def test_accelerate_with_its_config_file_in_the_code_is_accepted(tmp_path):
    recipe = {**ACCELERATE, "launcher_args": ["--config_file", "accel.yaml"]}
    loaded = load(write(tmp_path, recipe, {"train.py": "", "accel.yaml": "compute_environment: LOCAL_MACHINE\n"}))
    assert loaded.recipe.launcher == "accelerate"


def test_a_launcher_recipe_runs_multinode_as_the_driver(tmp_path):
    recipe = load(write(tmp_path, {**TORCHRUN, "args": ["--out", "${RAYFLEET_RUN_DIR}"], "max_restarts": 2}))
    recipe = recipe.recipe.model_copy(update={"launcher_args": ["--max-restarts=0"]})
    variables = job_env(recipe, "r1", "/runs", "/home/me")
    words = shlex.split(command(recipe, "/venv/bin/python", variables, ["--lr", "1"]).split("; ", 1)[1])
    assert words == [
        "/venv/bin/python", "-m", "rayfleet.node.driver.multinode", "--launcher", "torchrun", "--max-restarts", "2",
        "--launcher-arg=--max-restarts=0", "--", "train.py", "--out", "/runs/r1", "--lr", "1",
    ]  # fmt: skip
    parsed = parse(words[3:])
    assert (parsed.launcher, parsed.max_restarts, parsed.options) == ("torchrun", 2, ["--max-restarts=0"])
    assert parsed.target == ["train.py", "--out", "/runs/r1", "--lr", "1"]
    module = load(write(tmp_path, {**TORCHRUN, "entrypoint": "-m pkg.train"})).recipe
    assert command(module, "python", variables, []).endswith("-- -m pkg.train")


def test_a_launcher_needs_a_worker_node_per_worker(tmp_path):
    recipe = load(write(tmp_path, {**TORCHRUN, "resources": {"workers": 3, "cpus_per_worker": 0.5}})).recipe
    with pytest.raises(ConfigError, match="one node per worker; 3 workers need 3 worker nodes, but the local"):
        check_fits(recipe, Capacity("the local cluster", cpus=1, gpus=0, memory_gib=None, nodes=2))
    check_fits(recipe, Capacity("ECS", cpus=4, gpus=0, memory_gib=None, nodes=None))  # scales on demand


def test_torchrun_per_node_has_the_nodes_rank_and_rendezvous():
    shape = Shape(nodes=2, cpus=4, gpus=8)
    argv = launcher_argv("torchrun", shape, 1, "10.0.0.5", 29400, ["--max-restarts=0"], ["-m", "pkg.train", "--x"])
    assert argv == [
        "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--nproc-per-node=8",
        "--master-addr=10.0.0.5", "--master-port=29400", "--max-restarts=0", "-m", "pkg.train", "--x",
    ]  # fmt: skip
    cpu = launcher_argv("torchrun", Shape(nodes=3, cpus=1, gpus=0), 0, "h", 1, [], ["t.py"])
    assert "--nproc-per-node=1" in cpu and "--nnodes=3" in cpu


def test_accelerate_per_node_counts_processes_over_all_nodes():
    argv = launcher_argv("accelerate", Shape(nodes=2, cpus=4, gpus=4), 0, "h", 7, ["--mixed_precision=bf16"], ["t.py"])
    assert argv[:3] == ["-m", "accelerate.commands.launch", "--multi_gpu"]
    assert {"--num_machines=2", "--machine_rank=0", "--num_processes=8", "--main_process_ip=h"} <= set(argv)
    assert argv[-2:] == ["--mixed_precision=bf16", "t.py"]
    assert launcher_env("accelerate", Shape(2, 1, 0), 1, 1, "n")["ACCELERATE_USE_CPU"] == "true"
    assert "ACCELERATE_USE_CPU" not in launcher_env("accelerate", Shape(2, 1, 1), 1, 1, "n")
    assert launcher_env("torchrun", Shape(2, 1, 0), 1, 3, "abc") == {
        "RAYFLEET_NODE_RANK": "1", "RAYFLEET_ATTEMPT": "3", "RAYFLEET_RAY_NODE_ID": "abc",
    }  # fmt: skip


def test_shape_comes_from_the_jobs_variables():
    env = {"RAYFLEET_NUM_WORKERS": "3", "RAYFLEET_CPUS_PER_WORKER": "2.5", "RAYFLEET_GPUS_PER_WORKER": "4"}
    assert Shape.from_env(env) == Shape(nodes=3, cpus=2.5, gpus=4)
    assert Shape.from_env(env).procs_per_node == 4 and Shape(1, 1, 0).procs_per_node == 1


def test_a_failed_nodes_report_starts_with_the_scripts_own_traceback():
    from rayfleet.node.driver.launcher_output import excerpt

    lines = [
        "step 1",
        "[rank1]: Traceback (most recent call last):",
        '[rank1]:   File "train.py", line 9, in main',
        "[rank1]:     raise RuntimeError('bad shard')",
        "[rank1]: RuntimeError: bad shard",
        *[f"launcher noise {i}" for i in range(30)],
        "Traceback (most recent call last):",
        "  File 'run.py'",
        "ChildFailedError:",
        *[f"summary {i}" for i in range(5)],
    ]
    shown = excerpt(lines, last=6)
    assert shown[:4] == lines[1:5] and shown[4] == "..."
    assert shown[5:] == ["ChildFailedError:", *[f"summary {i}" for i in range(5)]]
    assert excerpt(["a", "b"]) == ["a", "b"]  # no traceback: the last lines


def test_the_scripts_traceback_loses_torchruns_prefix():
    from rayfleet.node.driver.launcher_output import script_traceback

    lines = [
        "x",
        "[rank1]: Traceback (most recent call last):",
        "[rank1]:   File 'a.py'",
        "[rank1]: KeyError: 'k'",
        "y",
    ]
    assert script_traceback(lines) == ["Traceback (most recent call last):", "  File 'a.py'", "KeyError: 'k'"]
    assert script_traceback(["no trace"]) == []


def test_a_rank_killed_by_a_signal_is_reported_by_its_last_words_not_torchruns_traceback():
    """A rank that aborts in C++ prints no traceback: the first one is torchrun's, and the abort message
    before it is what says why (a CI run once showed only torchrun's traceback for a SIGABRT)."""
    from rayfleet.node.driver.launcher_output import excerpt, script_traceback

    lines = [
        *[f"step {i}" for i in range(30)],
        "terminate called after throwing an instance of 'gloo::IoException'",
        "  what():  [pair.cc:598] Connection closed by peer",
        "E1128 failed (exitcode: -6) local_rank: 0 (pid: 1150)",
        "Traceback (most recent call last):",
        '  File "torch/distributed/run.py", line 1142, in <module>',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=====",
        "  exitcode  : -6 (pid: 1150)  (SIGABRT)",
    ]
    assert script_traceback(lines) == []  # not presented as the script's
    shown = excerpt(lines, last=2)
    assert "  what():  [pair.cc:598] Connection closed by peer" in shown
    assert shown[0] == "step 13" and shown[-1] == lines[-1]  # 20 lines before the launcher's traceback
