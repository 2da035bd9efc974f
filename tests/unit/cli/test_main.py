"""`rayfleet`, in-process: each verb's flags become the one typed call of the module that does the work, refusals are
one line and exit 2, and the exit codes are the documented ones. The modules themselves are tested beside
them (and end to end through make in the integration tier); here they are replaced by a recorder."""

from __future__ import annotations

import json

import pytest

from rayfleet.cli import main as cli
from rayfleet.core.aws import run_cli
from rayfleet.core.run_dir import RunDir


@pytest.fixture(autouse=True)
def restored_environment(monkeypatch):
    """--bucket sets RAYFLEET_RESULTS_BUCKET for the verb's process: recorded here, so that it is unset again
    after each test (it would leak into the other tests of this worker)."""
    monkeypatch.setenv("RAYFLEET_RESULTS_BUCKET", "recorded")
    monkeypatch.delenv("RAYFLEET_RESULTS_BUCKET")


@pytest.fixture
def called(monkeypatch):
    """Replace a module's verb function with a recorder: what it would have been called with."""
    seen = {}

    def record(module, name="main", code=0):
        def fake(*args, **kwargs):
            seen["argv"] = args[0] if args else None
            seen["args"], seen["kwargs"] = args, kwargs
            return code

        monkeypatch.setattr(module, name, fake)
        return seen

    return record


def test_every_verb_and_step_has_help_and_there_are_about_fifteen_verbs(capsys):
    verbs = cli.parser()._subparsers._group_actions[0].choices
    top = {"run", "launch", "runs", "logs", "cancel", "queue", "status", "exec", "deploy", "cluster", "serve"}
    assert set(verbs) == top | {"images", "token", "rehearse", "dashboard"}
    steps = [["deploy", s] for s in ("plan", "check", "down", "stop", "start")] + [
        ["runs", "plot"],
        ["runs", "tensorboard"],
    ]
    for argv in [[verb] for verb in verbs] + steps:
        with pytest.raises(SystemExit) as exc:
            cli.main([*argv, "--help"])
        assert exc.value.code == 0 and f"rayfleet {' '.join(argv)}" in capsys.readouterr().out


def test_run_forwards_where_name_sets_bucket_detach_and_the_jobs_args(called, monkeypatch):
    from rayfleet.targets import run as target_run

    seen = called(target_run, "submit_recipe", code=3)
    argv = ["run", "recipes/ddp.yaml", "--on", "local", "--name", "r1", "--set", "resources.workers=2"]
    code = cli.main([*argv, "--bucket", "bk", "-d", "--", "epochs=1", "--lr", "0.1"])
    assert code == 3  # the job's own exit code comes back unchanged
    assert seen["args"] == ("recipes/ddp.yaml",)
    called_with = seen["kwargs"]
    assert called_with["on"] == "local" and called_with["detach"] is True and called_with["name"] == "r1"
    assert called_with["sets"] == ["resources.workers=2", "storage=s3://bk/runs"]
    assert called_with["args"] == ["epochs=1", "--lr", "0.1"]
    import os

    assert os.environ["RAYFLEET_RESULTS_BUCKET"] == "bk"


def test_exec_and_serve_use_node_and_on_and_keep_sets_to_the_config(called):
    from rayfleet.ecs import shell
    from rayfleet.ops import serve

    seen = called(shell, "open_shell")
    cli.main(["exec", "--node", "worker-2", "--command", "nvidia-smi"])
    assert seen["args"][:2] == ("worker-2", "nvidia-smi")
    seen = called(serve, "serve_verb")
    cli.main(["serve", "up", "--run", "r1", "--on", "ecs", "--set", "replicas=2", "--bucket", "b"])
    assert seen["args"][:3] == ("up", "r1", "ecs")
    assert seen["args"][4] == ["replicas=2"]  # a bucket is no serving-config field
    assert seen["kwargs"]["runs_dir"] == "s3://b/runs"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "up"], "name the run to serve"),
        (["cluster", "run"], "name the command"),
    ],
)
def test_refusals_are_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_bad_flags_exit_2_and_interrupts_130(capsys, called):
    from rayfleet.ops import status

    with pytest.raises(SystemExit) as exc:
        cli.main(["exec", "--no-such-flag"])
    assert exc.value.code == 2
    called(status, "show_status")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    status.show_status = interrupted
    assert run_cli(cli.main, ["status"]) == 130


def test_rehearse_outside_a_checkout_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["rehearse", "down"]) == 2
    assert "checkout" in capsys.readouterr().err


def test_cancel_asks_a_running_run_to_checkpoint_and_stop_and_refuses_an_ended_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RAYFLEET_OUTPUTS", str(tmp_path / "none.json"))
    running = RunDir(str(tmp_path / "runs"), "r1")
    running.write("run.json", json.dumps({"state": "RUNNING"}))
    assert cli.main(["cancel", "--run", "r1"]) == 0
    assert json.loads(running.read("stop.json"))["reason"].startswith("cancelled")
    assert cli.main(["cancel", "--run", "r1"]) == 0 and "stopped now" in capsys.readouterr().out  # the second
    assert json.loads(running.read("stop.json"))["reason"] == "cancelled again (rayfleet cancel, twice)"
    ended = RunDir(str(tmp_path / "runs"), "r2")
    ended.write("run.json", json.dumps({"state": "SUCCEEDED"}))
    assert cli.main(["cancel", "--run", "r2"]) == 2 and "already ended" in capsys.readouterr().err
    assert ended.read("stop.json") is None
    assert run_cli(cli.main, ["cancel", "--run", "nope"]) == 2
    queued = RunDir(str(tmp_path / "runs"), "r3")
    queued.write("run.json", json.dumps({"state": "QUEUED"}))
    assert cli.main(["cancel", "--run", "r3"]) == 0 and "it leaves the queue" in capsys.readouterr().out
    cancelled = RunDir(str(tmp_path / "runs"), "r4")
    cancelled.write("run.json", json.dumps({"state": "CANCELLED"}))
    assert cli.main(["cancel", "--run", "r4"]) == 2 and "already ended (CANCELLED)" in capsys.readouterr().err
