import json

import pytest

from rayfleet.core import stop_request
from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.core.run_dir import RunDir
from rayfleet.ops.runs import table
from rayfleet.recipes import budget, cost
from rayfleet.recipes.fit import Capacity
from rayfleet.recipes.schema import Recipe
from rayfleet.train.control import run_control


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_budget_is_the_nearer_of_the_time_and_the_cost_limit():
    assert budget.limit_s(None, None, 12.0) is None
    assert budget.limit_s(2, None, 12.0) == (7200, "max_hours 2")
    assert budget.limit_s(2, 6, 12.0) == (1800, "max_cost_usd 6 at $12.00/hour")  # $6 at $12/h: 30 minutes
    assert budget.limit_s(None, 6, 0.0) is None  # a local run costs nothing here: no cost limit


def test_crossing_the_limit_asks_the_job_to_stop_once_then_stops_it_after_the_grace(tmp_path, capsys):
    run_dir, clock, stopped = RunDir(str(tmp_path), "r"), Clock(), []
    watch = budget.Budget(run_dir, (60, "max_hours 0.0167"), lambda: stopped.append(True), clock)
    clock.now += 59
    watch.tick()
    assert stop_request.requested(run_dir) is None and watch.reason is None
    clock.now += 1
    watch.tick()
    assert stop_request.requested(run_dir) == "stopped by budget: max_hours 0.0167 reached after 60 s"
    assert "asking the job to checkpoint and stop" in capsys.readouterr().out
    clock.now += budget.GRACE_S
    watch.tick()
    assert stopped == []  # still within the grace period
    clock.now += 1
    watch.tick()
    watch.tick()
    assert stopped == [True]  # once
    stop_request.clear(run_dir)
    assert stop_request.requested(run_dir) is None


def test_a_cancelled_run_that_does_not_end_is_stopped_after_the_grace_or_at_a_second_cancel(tmp_path, capsys):
    """`rayfleet cancel` of a running script that never reads the request: the follower's clock stops it."""
    run_dir, clock, stopped = RunDir(str(tmp_path), "r"), Clock(), []
    watch = budget.Budget(run_dir, None, lambda: stopped.append(True), clock)  # no budget: the clock still runs
    watch.tick()
    stop_request.request(run_dir, stop_request.CANCELLED)
    clock.now += budget.CANCEL_POLL_S
    watch.tick()
    assert "cancel asked: the job checkpoints and ends" in capsys.readouterr().out
    clock.now += budget.GRACE_S + 1
    watch.tick()
    watch.tick()
    assert stopped == [True]  # once, after the grace
    again = budget.Budget(run_dir, None, lambda: stopped.append("now"), clock)
    stop_request.request(run_dir, stop_request.CANCELLED_NOW)
    clock.now += budget.CANCEL_POLL_S
    again.tick()
    again.tick()
    assert stopped == [True, "now"]  # at once, and once


def test_an_ecs_run_holds_the_worker_instances_its_workers_fill_at_the_list_price():
    shape = INSTANCE_TYPES["g5.12xlarge"]  # 4 GPUs
    cap = Capacity("workers", float(shape["vcpus"]), int(shape["gpus"]), shape["memory_mib"] / 1024, None)
    recipe = Recipe(name="r", entrypoint="t.py", resources={"workers": 6, "gpus_per_worker": 1, "cpus_per_worker": 4})
    held = cost.held_ecs(recipe, "g5.12xlarge", cap)
    assert held["instances"] == [{"instance_type": "g5.12xlarge", "count": 2, "lifecycle": "on-demand"}]
    assert held["usd_per_hour"] == pytest.approx(2 * shape["usd_per_hour"])
    assert cost.cost_usd(held, 1800) == pytest.approx(shape["usd_per_hour"])  # 2 instances for half an hour
    assert cost.cost_usd(cost.held_local(), 3600) == 0.0
    assert cost.held_ecs(recipe, "x9.unknown", None)["usd_per_hour"] == 0.0


def test_make_runs_shows_each_runs_cost(tmp_path):
    rows = [
        {
            "run": "a",
            "where": "ecs",
            "group": "ddp",
            "state": "STOPPED",
            "started": "2026-11-24T10:00:00+00:00",
            "duration_s": 3600,
            "cost_usd": 40.96,
            "results": "s3://b/runs/a/",
            "attempts": [{"attempt": 1, "state": "STOPPED", "reason": "submitted"}],
        },
        {
            "run": "b",
            "where": "local",
            "state": "?",
            "started": "",
            "duration_s": None,
            "cost_usd": None,
            "results": "/runs/b",
            "attempts": [],
        },
    ]
    rows[0]["goodput"] = 0.8123  # from the run's ledger (rayfleet/core/ledger.py)
    lines = table(rows).splitlines()
    head = ["RUN", "WHERE", "GROUP", "STATE", "TRIES", "STARTED", "DURATION", "GOODPUT", "COST", "RESULTS"]
    assert lines[0].split() == head
    assert lines[1].split()[2] == "ddp" and lines[1].split()[6:9] == ["1h00m", "81%", "$40.96"]
    assert lines[2].split()[2:3] + lines[2].split()[4:8] == ["-", "-", "-", "-", "-"]  # nothing recorded: "-"
    for forged in (7, "99%", True, float("nan")):  # runs/ is the jobs': a value no ledger writes is "?"
        rows[0]["goodput"] = forged
        assert table(rows).splitlines()[1].split()[7] == "?"


def test_a_stop_request_reaches_every_rank_through_one_all_reduce(tmp_path):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        run_dir = RunDir(str(tmp_path), "r")
        assert run_control.agreed(run_dir, 0, torch.device("cpu")) is None
        stop_request.request(run_dir, "stopped by budget: max_hours 1")
        assert run_control.agreed(run_dir, 0, torch.device("cpu")) == "stopped by budget: max_hours 1"
        assert json.loads((tmp_path / "r" / "stop.json").read_text()) == {"reason": "stopped by budget: max_hours 1"}
    finally:
        dist.destroy_process_group()


def test_budget_keys_are_checked():
    with pytest.raises(ValueError, match="max_hours"):
        Recipe(name="r", entrypoint="t.py", max_hours=0)
    assert Recipe(name="r", entrypoint="t.py", max_cost_usd=12.5).max_cost_usd == 12.5


def test_spot_workers_are_priced_from_ec2s_spot_price_history_and_the_cluster_spend_adds_up():
    """Against moto's EC2 (its history: one price per zone); the arithmetic is the point."""
    from datetime import UTC, datetime, timedelta

    import boto3
    from moto import mock_aws

    with mock_aws():
        ec2 = boto3.client("ec2", region_name="us-east-1")
        now = datetime.now(UTC)
        history = ec2.describe_spot_price_history(InstanceTypes=["g5.xlarge"], ProductDescriptions=["Linux/UNIX"])
        prices = [float(p["SpotPrice"]) for p in history["SpotPriceHistory"]]
        spot = cost.spot_usd_per_hour(ec2, "g5.xlarge", now - timedelta(hours=1), now)
        assert prices and spot == pytest.approx(sum(prices) / len(prices))
        recipe = Recipe(name="r", entrypoint="t.py", resources={"workers": 2, "gpus_per_worker": 1})
        shape = INSTANCE_TYPES["g5.xlarge"]
        cap = Capacity("workers", float(shape["vcpus"]), int(shape["gpus"]), shape["memory_mib"] / 1024, None)
        held = cost.held_ecs(recipe, "g5.xlarge", cap, spot)
        assert held["instances"] == [{"instance_type": "g5.xlarge", "count": 2, "lifecycle": "spot"}]
        assert held["usd_per_hour"] == pytest.approx(round(2 * spot, 4))
        two_hours_ago = now - timedelta(hours=2)
        instances = [
            {"instance_type": "m5.xlarge", "launch_time": two_hours_ago, "lifecycle": "on-demand"},
            {"instance_type": "g5.xlarge", "launch_time": now - timedelta(hours=1), "lifecycle": "spot"},
            {"instance_type": "g5.xlarge", "launch_time": None, "lifecycle": "on-demand"},  # not started: nothing
        ]
        spent, since = cost.spend_usd(ec2, instances, now)
        assert since == two_hours_ago
        assert spent == pytest.approx(round(2 * INSTANCE_TYPES["m5.xlarge"]["usd_per_hour"] + 1 * spot, 2))


class LostTrainer:
    """The ECS side of `rayfleet run`'s follower (rayfleet/targets/run.py follow_relaunching): the first trainer task
    is lost an hour after its job was submitted (its instance reclaimed); a relaunched one, if any, ends the run."""

    def __init__(self, run_dir: RunDir, now):
        from datetime import timedelta

        self.run_dir, self.now = run_dir, now
        self.launched = now - timedelta(hours=2)
        self.stopped = self.launched + timedelta(minutes=5, hours=1)
        self.seen_by_the_relaunch: list[dict] = []
        self.cluster_name = "c"  # the Outputs it reads

    def client(self, name):
        return self

    def describe_tasks(self, cluster, tasks):
        reason = "Host EC2 (instance i-0abc) terminated."
        return {"tasks": [{"lastStatus": "STOPPED", "stoppedReason": reason, "stoppedAt": self.stopped}]}

    def follow_task(self, aws, out, task_arn, stream):
        if task_arn == "arn:task/2":  # the relaunched trainer's driver ends the run
            self.run_dir.update(state="SUCCEEDED", exit_code=0, message="")
            return 0
        return 1

    def start_trainer(self):
        from datetime import timedelta

        launched = self.stopped + timedelta(minutes=1)
        self.run_dir.update(
            task_arn="arn:task/2", launched_at=launched.isoformat(timespec="seconds"), state="SUBMITTED"
        )
        self.seen_by_the_relaunch.append(self.run_dir.record())
        return {"task_arn": "arn:task/2", "log_stream": "s/2"}

    def follow(self, recipe, monkeypatch) -> int:
        from datetime import timedelta

        from rayfleet.targets import ecs as run

        held = {"where": "ecs", "instances": [], "usd_per_hour": 4.0}
        submitted = self.launched + timedelta(minutes=5)  # the job's submission: an hour before the loss
        self.run_dir.update(
            state="RUNNING",
            held=held,
            attempts=[],
            task_arn="arn:task/1",
            log_stream="s/1",
            launched_at=self.launched.isoformat(timespec="seconds"),
            submitted_at=submitted.isoformat(timespec="seconds"),
            job_id="rayfleet-lost-1",
        )
        monkeypatch.setattr(run, "follow_task", self.follow_task)
        return run.follow_relaunching(self, self, self.run_dir, recipe, self.run_dir.record(), self.start_trainer)


def test_a_lost_trainer_attempt_counts_toward_the_relaunched_runs_budget_and_cost(tmp_path, monkeypatch):
    """Issue 27: the lost attempt was recorded without its time, so the relaunched trainer's budget and the run's
    cost started from zero again, though recipes/README.md says they count all attempts together."""
    from datetime import UTC, datetime

    from rayfleet.ops.runs import _row

    trainer = LostTrainer(RunDir(str(tmp_path), "lost"), datetime.now(UTC).replace(microsecond=0))
    recipe = Recipe(name="r", entrypoint="t.py", retries=1, max_hours=2)
    assert trainer.follow(recipe, monkeypatch) == 0
    (relaunch,) = trainer.seen_by_the_relaunch
    (lost,) = relaunch["attempts"]
    assert lost["state"] == "LOST" and lost["duration_s"] == 3600.0  # submission to the task's stop
    # What the relaunched trainer's driver gets (rayfleet/recipes/job.py): the hour the lost attempt took is gone.
    assert budget.left(recipe.max_hours, recipe.max_cost_usd, relaunch) == (3600.0, "max_hours 2")
    assert cost.spent_s(relaunch) == 3600.0
    # make runs while the relaunched trainer runs: the lost hour plus the new attempt since its launch (54 min).
    row = _row("lost", "ecs", relaunch, "")
    assert row["duration_s"] == pytest.approx(54 * 60, abs=30)
    assert row["cost_usd"] == pytest.approx(4.0 * (3600 + 54 * 60) / 3600, abs=0.05)


def test_a_run_lost_beyond_its_retries_costs_the_time_of_its_lost_attempt(tmp_path, monkeypatch):
    from datetime import UTC, datetime

    from rayfleet.ops.runs import _row

    trainer = LostTrainer(RunDir(str(tmp_path), "lost"), datetime.now(UTC).replace(microsecond=0))
    assert trainer.follow(Recipe(name="r", entrypoint="t.py"), monkeypatch) == 1  # retries: 0
    final = trainer.run_dir.record()
    assert final["state"] == "LOST" and [a["duration_s"] for a in final["attempts"]] == [3600.0]
    assert final["cost_usd"] == 4.0 and final["duration_s"] == 3600.0
    assert _row("lost", "ecs", final, "")["cost_usd"] == 4.0  # rayfleet runs' COST
