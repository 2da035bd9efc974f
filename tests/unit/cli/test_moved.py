"""The library modules' old command lines (`python -m rayfleet.ops.deploy.infra deploy`, ...) are gone since `rayfleet`
parses every verb once: each fails in one line naming the verb that replaced it, exit 2, and does nothing."""

from __future__ import annotations

import runpy

import pytest

OLD = {
    "rayfleet.ops.runs": "rayfleet runs",
    "rayfleet.ops.runs.logs": "rayfleet logs",
    "rayfleet.ops.runs.queued": "rayfleet queue",
    "rayfleet.ops.runs.plot": "rayfleet runs plot",
    "rayfleet.ops.runs.tensorboard": "rayfleet runs tensorboard",
    "rayfleet.ops.status": "rayfleet status",
    "rayfleet.ops.images": "rayfleet images",
    "rayfleet.ops.deploy.infra": "rayfleet deploy [plan|check|down]",
    "rayfleet.ops.serve": "rayfleet serve",
    "rayfleet.ecs.stop": "rayfleet deploy stop",
    "rayfleet.ecs.start": "rayfleet deploy start",
    "rayfleet.ecs.shell": "rayfleet exec",
    "rayfleet.ecs.launch": "rayfleet launch",
    "rayfleet.ecs.rotate_token": "rayfleet token rotate",
    "rayfleet.targets.run": "rayfleet run",
    "rayfleet.local": "rayfleet cluster",
    "rayfleet.local.cli": "rayfleet cluster",
}


@pytest.mark.parametrize("module", sorted(OLD))
def test_an_old_command_line_fails_in_one_line_naming_the_verb(module, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", [module, "deploy", "--yes"])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module(module, run_name="__main__", alter_sys=False)
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: `python -m {module}` is gone: use `{OLD[module]}")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("plan", "deploy plan"),
        ("check", "deploy check"),
        ("down", "deploy down"),
        ("stop", "deploy stop"),
        ("start", "deploy start"),
        ("plot", "runs plot"),
        ("tensorboard", "runs tensorboard"),
    ],
)
def test_a_verb_that_became_a_groups_step_fails_in_one_line_naming_it(old, new, capsys):
    from rayfleet.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main([old, "--yes"])
    assert exc.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: `rayfleet {old}` is gone: use `rayfleet {new}`")
