"""The ECS trainer's recipe driver (rayfleet/node/driver/recipe.py): its exit code when the head went away while the
run was queued is the one rayfleet-node rejoins on (tests/unit/node/test_ray_node.py)."""

from __future__ import annotations

from rayfleet.core.errors import EXIT_HEAD_LOST
from rayfleet.node.driver import recipe as driver
from rayfleet.recipes.job import HeadLostWhileQueued
from rayfleet.recipes.schema import Recipe


def test_a_run_whose_head_went_away_while_queued_exits_head_lost(tmp_path, monkeypatch, capsys):
    def run_job(recipe, run_dir, **how):
        raise HeadLostWhileQueued(f"run {run_dir.run_name}: the head went away while the run waited in the queue")

    monkeypatch.setattr(driver, "verified_code", lambda run_dir, uri, sha256, scratch: tmp_path / "code.zip")
    monkeypatch.setattr(driver, "run_job", run_job)
    env = {
        "RAYFLEET_RECIPE": Recipe(name="r", entrypoint="t.py").model_dump_json(),
        "RAYFLEET_CODE_URI": "unused",
        "RAYFLEET_CODE_SHA256": "unused",
        "RAYFLEET_STORAGE": str(tmp_path),
        "RAYFLEET_RUN_NAME": "r",
        "RAYFLEET_DASHBOARD_URL": "http://10.0.0.5:8265",
    }
    assert driver.main([], env=env) == EXIT_HEAD_LOST
    assert "run r: the head went away while the run waited in the queue" in capsys.readouterr().err
