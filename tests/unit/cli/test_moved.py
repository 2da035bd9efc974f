"""The library modules' old command lines (`python -m rayfleet.ops.deploy.infra deploy`, ...) are gone since `rayfleet`
parses every verb once: each fails in one line naming the verb that replaced it, exit 2, and does nothing."""

from __future__ import annotations

import runpy

import pytest

OLD = {
    "rayfleet.ops.runs": "rayfleet runs",
    "rayfleet.ops.runs.logs": "rayfleet logs",
    "rayfleet.ops.runs.queued": "rayfleet queue",
    "rayfleet.ops.runs.plot": "rayfleet plot",
    "rayfleet.ops.runs.tensorboard": "rayfleet tensorboard",
    "rayfleet.ops.status": "rayfleet status",
    "rayfleet.ops.images": "rayfleet images",
    "rayfleet.ops.deploy.infra": "rayfleet plan|check|deploy|down",
    "rayfleet.ops.serve": "rayfleet serve",
    "rayfleet.ecs.stop": "rayfleet stop",
    "rayfleet.ecs.start": "rayfleet start",
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
