"""The run queue on the real local test cluster (head + 2 workers x 1 CPU): runs that each need the whole
cluster go one after another, in priority-then-submission order, each placed whole; a cancelled queued run
never starts; a cancelled running one is stopped (at the second cancel: this program never reads the request;
the built-in jobs' checkpoint-first stop is the budget's, tests/integration/test_recipe_run_on_local_cluster.py)
and the next run starts; `rayfleet queue` shows positions and reasons while they wait; a detached run is
followed in the background and re-attached with `rayfleet logs -f`."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rayfleet.core.run_queue import Queue
from tests.integration.helpers import REPO
from tests.integration.run_attempts import RAY_LOST_THE_CODE, check_attempts

pytestmark = pytest.mark.integration

# A Ray program that takes both workers through a placement group of its own (Ray Train would take them the
# same way, at twice the time) and says when it started, first ran on them and ended. It fails when Ray
# cannot place its group at once: an admitted run must find its workers free.
SCRIPT = textwrap.dedent("""
    import json, os, sys, time
    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    started = time.time()
    run_dir = os.environ["RAYFLEET_RUN_DIR"]
    gate = sys.argv[1] if len(sys.argv) > 1 else None
    ray.init()
    group = placement_group([{"CPU": 1.0}] * 2, strategy="PACK")
    ray.get(group.ready(), timeout=60)

    @ray.remote(num_cpus=1)
    def work():
        first = time.time()
        deadline = time.time() + 180
        while gate and not os.path.exists(gate) and time.time() < deadline:  # held until the test has looked
            time.sleep(0.2)
        time.sleep(1)
        return first

    placed = [PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i) for i in range(2)]
    firsts = ray.get([work.options(scheduling_strategy=where).remote() for where in placed])
    out = {"started": started, "first_step": min(firsts), "world": len(firsts), "ended": time.time()}
    with open(os.path.join(run_dir, "times.json"), "w") as f:
        json.dump(out, f)
""")


def submit(env: dict, recipe: Path, run: str, priority: int, *args: str, detach: bool = False) -> subprocess.Popen:
    """`rayfleet run` of the recipe on the session cluster, with its priority and the script's arguments."""
    how = ["--on", "local", "--name", run, "--set", f"priority={priority}", *(["--detach"] if detach else [])]
    argv = [sys.executable, "-m", "rayfleet.cli.main", "run", str(recipe), *how, "--", *args]
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(what, deadline_s: float, why: str):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(why)


def test_runs_that_each_need_the_cluster_queue_in_priority_order_and_a_queued_one_can_be_cancelled(
    cluster_env, tmp_path
):
    """Four submissions on the one session cluster prove what no unit test can: Ray's placement of the whole
    group as the admission test, the handoff from one run's end to the next run's start, and the queue kept
    by the jobs themselves on the cluster (the unit tests replace Ray's placement with a function). One of
    them is detached: its forked follower must submit, queue and record a real job after its parent has
    exited (tests/unit/targets/test_detach.py plays the follower's part)."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "train.py").write_text(SCRIPT)
    storage = tmp_path / "runs"
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        json.dumps(
            {
                "name": "queued",
                "code": "code",
                "entrypoint": "train.py",
                "resources": {"workers": 2, "cpus_per_worker": 1},
                "storage": str(storage),
            }
        )
    )
    env = {**cluster_env, "RAYFLEET_OUTPUTS": str(tmp_path / "none.json")}
    queue = Queue(str(Path(cluster_env["RAYFLEET_STATE_DIR"]) / "cluster"))

    def states() -> dict[str, str]:
        return {e.run: e.state for e in queue.entries(time.time())}

    gate = tmp_path / "gate"  # never opened: the first run holds the cluster until it is cancelled
    wait_for(lambda: not states(), 60, f"entries an earlier test left in the queue: {states()}")  # first is alone
    procs = {"first": submit(env, recipe, "first", 0, str(gate))}
    try:
        wait_for(lambda: states().get("first") == "running", 120, "the first run was never admitted and placed")
        detached = submit(env, recipe, "low", 0, detach=True).communicate(timeout=120)[0]
        assert "followed in the background" in detached, detached
        wait_for(lambda: "low" in states(), 60, "the second run never queued")
        procs["low"] = subprocess.Popen(  # re-attached: the queued run's output from the start, and its end
            [sys.executable, "-m", "rayfleet.cli.main", "logs", "--run", "low", "-f"],
            env=env,
            cwd=tmp_path,  # its ./runs is where the recipe keeps its runs
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        procs["gone"] = submit(env, recipe, "gone", 0)
        procs["high"] = submit(env, recipe, "high", 3)  # submitted last, it goes first among the waiting
        wait_for(lambda: {"gone", "high"} <= set(states()), 60, "the later runs never queued")
        shown = json.loads(
            subprocess.run(
                [sys.executable, "-m", "rayfleet.cli.main", "queue", "--json"],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
        )
        waiting = {r["run"]: r for r in shown if r["state"] == "waiting"}
        assert shown[0]["run"] == "first" and shown[0]["position"] is None
        assert {run: r["position"] for run, r in waiting.items()} == {"high": 1, "low": 2, "gone": 3}
        assert wait_for(
            lambda: "behind high (priority 3)" in (queue.get("gone") or queue.get("low")).reason,
            30,
            "no reason while waiting",
        )

        def cancel(run: str) -> str:
            done = subprocess.run(
                [sys.executable, "-m", "rayfleet.cli.main", "cancel", "--run", run],
                env=env,
                cwd=tmp_path,  # its ./runs is where the recipe keeps its runs
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert "leaves the queue" in cancel("gone")
        # The running first run never reads the request (a bare Ray program): the second cancel stops it now.
        assert "it checkpoints, then ends" in cancel("first") and "stopped now" in cancel("first")
        outputs = {run: proc.communicate(timeout=300)[0] for run, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    codes = {run: proc.returncode for run, proc in procs.items()}
    assert codes == {"first": 130, "low": 0, "gone": 130, "high": 0}, outputs
    for run in ("gone", "first"):  # one never started, one was stopped while it ran
        record = json.loads((storage / run / "run.json").read_text())
        assert record["state"] == "CANCELLED" and not (storage / run / "times.json").exists()
    check_attempts(json.loads((storage / "first" / "run.json").read_text()), [("CANCELLED", 130)])
    # submitted, it waited in its job's admission loop until cancelled
    check_attempts(json.loads((storage / "gone" / "run.json").read_text()), [("CANCELLED", 130)])
    assert "cancelled again: stopping the job now" in outputs["first"]
    # alone in the queue, the first went at once, and its heartbeat saw Ray place it (it was "running" above)
    assert "admitted at once: no other run in the queue" in outputs["first"]
    assert "queued: position" in outputs["low"] and "admitted after" in outputs["low"]  # through the re-attach
    assert "[rayfleet] run low succeeded" in (storage / "low" / "follower.log").read_text()
    times = {run: json.loads((storage / run / "times.json").read_text()) for run in ("high", "low")}
    assert all(t["world"] == 2 for t in times.values())
    # one after another, the higher priority before the earlier submission, none overlapping another
    assert times["high"]["ended"] <= times["low"]["started"]
    for run in ("high", "low"):
        record = json.loads((storage / run / "run.json").read_text())
        assert record["state"] == "SUCCEEDED"
        check_attempts(record, [("SUCCEEDED", 0)], allowing=RAY_LOST_THE_CODE)
    to_step = {run: round(t["first_step"] - t["started"], 1) for run, t in times.items()}
    print(f"admission to first step (s): {to_step}")
    assert states() == {}  # every entry removed when its run ended
