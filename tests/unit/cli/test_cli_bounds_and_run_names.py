"""Issue 54 R9 and R10 (the command's part): every `--run`/`--name` obeys the run-name rule, and every number a
verb takes is bounded, so a bad value is the parser's one-line refusal with exit 2, before anything happens.
`rayfleet cancel --run ..` used to write ./stop.json (the run directory `runs/..`); `rayfleet cluster up
--workers -1` used to exit 1 from deep inside the cluster's start."""

from __future__ import annotations

import argparse

import pytest

from rayfleet.cli import main as cli
from rayfleet.core import arg_bounds, run_name
from rayfleet.core.errors import ConfigError


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    monkeypatch.setenv("RAYFLEET_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def refused(argv: list[str], capsys) -> str:
    """The parser's refusal: exit 2 and its error line (argparse prints usage first, then one `error:`)."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1, errors
    return errors[0]


def test_cancel_of_the_run_named_dotdot_writes_nothing_outside_runs(in_tmp, capsys):
    line = refused(["cancel", "--run", ".."], capsys)
    assert "rayfleet cancel" in line and "run name" in line
    assert not (in_tmp / "stop.json").exists() and not (in_tmp / "runs" / "stop.json").exists()


@pytest.mark.parametrize("name", ["..", ".", "a/b", "/etc", "-x", "", "x" * 101, "a\x1b[2Jb"])
@pytest.mark.parametrize(
    "verb",
    [
        ["cancel", "--run"],
        ["logs", "--run"],
        ["runs", "plot", "--run"],
        ["runs", "tensorboard", "--run"],
        ["serve", "up", "--run"],
        ["run", "recipes/ddp.yaml", "--name"],
        ["launch", "ddp", "--name"],
    ],
    ids=lambda v: " ".join(v),
)
def test_every_run_flag_refuses_what_is_no_run_name(verb, name, in_tmp, capsys):
    line = refused([*verb, name], capsys)
    assert f"rayfleet {verb[0]}" in line


def test_a_good_run_name_passes_the_rule():
    assert run_name.run_name_arg("ddp-20261122-101500.v2_a") == "ddp-20261122-101500.v2_a"


def test_locate_refuses_what_is_no_run_name(in_tmp):
    from rayfleet.ops.runs import locate

    with pytest.raises(ConfigError, match="no run name"):
        locate("..")


def test_the_jobs_config_refuses_what_the_verbs_refuse():
    from pydantic import ValidationError

    from rayfleet.train.job_config import JobConfig

    assert JobConfig(run_name="ddp-1.v2").run_name == "ddp-1.v2"
    for bad in ("..", "a/b", ".hidden", "x" * 101):
        assert not run_name.valid(bad)
        with pytest.raises(ValidationError):
            JobConfig(run_name=bad)


@pytest.mark.parametrize(
    "argv",
    [
        ["cluster", "up", "--workers", "-1"],
        ["cluster", "up", "--workers", "0"],
        ["cluster", "run", "--workers", "two", "--", "true"],
        ["cluster", "up", "--cpus-per-worker", "nan"],
        ["cluster", "up", "--cpus-per-worker", "inf"],
        ["cluster", "up", "--cpus-per-worker", "1e300"],
        ["cluster", "up", "--cpus-per-worker", "0"],
        ["cluster", "up", "--gpus-per-worker", "-1"],
        ["runs", "--limit", "-5"],
        ["status", "--runs", "-1"],
        ["runs", "tensorboard", "--run", "r1", "--port", "70000"],
        ["deploy", "start", "--timeout", "inf"],
        ["deploy", "start", "--timeout", "-1"],
        ["serve", "up", "--run", "r1", "--timeout", "nan"],
    ],
    ids=" ".join,
)
def test_numbers_out_of_bounds_are_refused_by_the_parser(argv, in_tmp, capsys):
    line = refused(argv, capsys)
    assert f"rayfleet {argv[0]}" in line


def test_the_local_clusters_own_limit_is_bad_input_too(in_tmp, monkeypatch, capsys):
    """Past the parser's bounds, ClusterSpec's own (at most 50 local workers) is also exit 2, one line."""
    from rayfleet.local import cli as local_cli

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):  # use_token_auth sets them for the process
        monkeypatch.setenv(name, "recorded")
        monkeypatch.delenv(name)
    assert cli.main(["cluster", "up", "--workers", "51"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: rayfleet cluster up:") and "50" in err[0]
    assert local_cli.cluster_verb("up", workers=51) == 2


def test_the_bounded_types():
    assert arg_bounds.int_in(1, 3)("3") == 3
    assert arg_bounds.float_in(0, 10, low_open=True)("2.5") == 2.5
    assert arg_bounds.float_in(0, 10)("0") == 0.0
    for parse, text in [
        (arg_bounds.int_in(1, 3), "4"),
        (arg_bounds.int_in(1, 3), "1.5"),
        (arg_bounds.float_in(0, 10, low_open=True), "0"),
        (arg_bounds.float_in(0, 10), "-inf"),
        (arg_bounds.float_in(0, 10), "NaN"),
        (arg_bounds.float_in(0, 10), "ten"),
    ]:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
