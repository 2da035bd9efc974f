"""The Makefile is a front door of one-line `rayfleet` calls: what each target forwards, read from `make -n`
(the command make would run) and parsed by the CLI's own parser, in-process. Each built-in recipe also runs
end to end through its shortcut's command on the local cluster, through the Jobs API: `make train-ddp` in
test_recipe_run_on_local_cluster's budget test (and its second submission under the same name), `make
train-fsdp` (recipes/fsdp-tiny.yaml, its ${RAYFLEET_...} arguments expanded against the job) as the session's
DeepSpeed run "learn" of test_fsdp_on_local_cluster (tests/integration/fsdp_recipe_run.py)."""

from __future__ import annotations

import os

import pytest

from rayfleet.cli.main import parser
from tests.integration.make_plan import make_n, planned


def parsed(argv: list[str]):
    split = argv.index("--") if "--" in argv else len(argv)
    opts = parser().parse_args(argv[:split])
    return opts, argv[split + 1 :]


@pytest.mark.parametrize(
    ("target", "recipe", "local_recipe"),
    [("train-ddp", "recipes/ddp.yaml", None), ("train-fsdp", "recipes/fsdp.yaml", "recipes/fsdp-tiny.yaml")],
)
def test_train_targets_forward_where_name_settings_and_args_to_rayfleet_run(target, recipe, local_recipe):
    _, argv = planned(target, "ON=local", "NAME=r1", "SET=storage=/s resources.workers=2", "ARGS=epochs=1 lr=0.1")
    opts, job_args = parsed(argv)
    assert (opts.verb, opts.recipe, opts.local_recipe) == ("run", recipe, local_recipe)
    assert (opts.on, opts.name, opts.detach) == ("local", "r1", False)
    assert opts.set == ["storage=/s", "resources.workers=2"]
    assert job_args[-2:] == ["epochs=1", "lr=0.1"]


def test_train_ddp_passes_data_dir_bucket_and_detach_only_when_given():
    env, argv = planned("train-ddp", "DATA_DIR=/d", "BUCKET=b", "DETACH=1")
    opts, job_args = parsed(argv)
    assert opts.set == ["data=/d"] and opts.bucket == "b" and opts.detach is True and not env and not job_args
    env, argv = planned("train-ddp")
    opts, job_args = parsed(argv)
    assert not env and not job_args and not opts.set and opts.on == "auto" and opts.name is None and not opts.bucket
    assert opts.estimate is False and parsed(planned("train-ddp", "ESTIMATE=1")[1])[0].estimate is True


@pytest.mark.parametrize(
    ("target", "variables", "verb", "expected"),
    [
        ("logs", ["RUN=r1", "FOLLOW=1", "SINCE=10m"], "logs", {"run": "r1", "follow": True, "since": "10m"}),
        ("cancel", ["RUN=r1"], "cancel", {"run": "r1"}),
        ("exec", ["NODE=worker-2", "CMD=nvidia-smi"], "exec", {"node": "worker-2", "command": "nvidia-smi"}),
        ("plot", ["RUN=a", "RUNS=b c"], "runs plot", {"run": ["a", "b", "c"], "runs_dir": None}),
        ("tensorboard", ["RUN=a", "BUCKET=bk"], "runs tensorboard", {"run": ["a"], "bucket": "bk"}),
        ("serve", ["RUN=r1", "ON=ecs", "SET=replicas=2"], "serve", {"run": "r1", "on": "ecs", "set": ["replicas=2"]}),
        ("clean", ["AUTO_APPROVE=1", "DELETE_RESULTS=1"], "deploy down", {"yes": True, "delete_results": True}),
        ("clean", [], "deploy down", {"yes": False, "delete_results": False}),
        (
            "deploy",
            ["TFVARS=one-group.tfvars", "FORCE=1"],
            "deploy",
            {"var_file": "one-group.tfvars", "force": True, "yes": False},
        ),
        ("deploy", ["AUTO_APPROVE=1"], "deploy", {"yes": True, "force": False}),
        ("check", ["TFVARS=one-group.tfvars"], "deploy check", {"var_file": "one-group.tfvars"}),
        ("start", ["RECIPE=recipes/ddp.yaml"], "deploy start", {"recipe": "recipes/ddp.yaml"}),
        ("start", [], "deploy start", {"recipe": None}),
        ("serve", ["ACTION=down", "ON=local"], "serve", {"action": "down", "on": "local"}),
        ("clean", ["ACTION=local"], "cluster", {"action": "down"}),
    ],
)
def test_each_variable_means_one_thing_in_every_target(target, variables, verb, expected):
    _, argv = planned(target, *variables)
    opts, _ = parsed(argv)
    step = getattr(opts, "view", None) or getattr(opts, "step", None)  # a group's step: `runs plot`, `deploy down`
    assert " ".join([opts.verb, *([step] if step else [])]) == verb
    assert {k: getattr(opts, k) for k in expected} == expected


def test_a_missing_run_is_the_clis_one_line_and_exit_2_and_target_is_gone(capsys):
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(["logs"])
    assert exc.value.code == 2 and "--run" in capsys.readouterr().err
    result = make_n("run", "TARGET=local")
    assert result.returncode == 2 and "TARGET is gone: ON=local|ecs" in result.stderr


# make as a user's shell runs it: under `make test` the tests inherit MAKELEVEL and MAKEFLAGS, and a make started
# from there prints "make[1]: Entering directory" around what a user would see.
SHELL_ENV = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "MFLAGS"}


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("cluster-up", "rayfleet cluster up"),
        ("train-ddp-local", "make train-ddp ON=local"),
        ("rotate-ray-token", "rayfleet token rotate"),
        ("serve-down", "make serve ACTION=down"),
        ("dashboard", "make cloudwatch-template"),
        ("bench-run-start", "make bench BENCH=run-start"),
    ],
)
def test_an_old_target_fails_in_one_line_naming_the_new_one(old, new):
    """Names from shell histories and scripts stop make before anything runs, exit 2, with what replaced them."""
    import subprocess

    from tests.integration.helpers import REPO

    done = subprocess.run(["make", "-n", old], cwd=REPO, env=SHELL_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert f"make {old} is gone: use {new}" in line


def test_bench_runs_the_named_benchmark_and_refuses_an_unknown_one():
    import subprocess

    from tests.integration.helpers import REPO

    planned_lines = make_n("bench", "BENCH=run-start", "BENCH_ARGS=--timeline").stdout.splitlines()
    assert planned_lines[-1].split()[1:] == ["-m", "bench.run_start", "--timeline"]
    done = subprocess.run(
        ["make", "bench", "BENCH=nope"], cwd=REPO, env=SHELL_ENV, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and done.stdout == ""  # refused before set-up or any data is made
    (line,) = done.stderr.splitlines()
    assert "BENCH=nope: choose one of ddp vs-blueprint" in line
