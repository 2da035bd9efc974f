"""Worker groups on the suite's shared local cluster (`rayfleet cluster up --group a=1 --group b=1`: two
worker nodes of 1 CPU, each labelled with its group): a recipe's `resources.group` is placed on that group's
nodes by Ray itself, a recipe naming none goes to the smallest group that fits, and the queue admits a run
only when its own group has room, whatever another group's line holds; a run allowed to move leaves a
full group's line for another group that fits (rayfleet/recipes/group_move.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rayfleet.core.run_queue import Queue
from tests.integration.helpers import REPO, run_verb

pytestmark = pytest.mark.integration

# A launcher recipe's script: writes the Ray node it runs on, then holds it until the gate file exists (if named).
HOLD = """
import os, sys, time
gate, run_dir = (sys.argv[1:] or [None])[0], os.environ["RAYFLEET_RUN_DIR"]
with open(os.path.join(run_dir, "node"), "w") as f:
    f.write(os.environ["RAYFLEET_RAY_NODE_ID"])
while gate and not os.path.exists(gate):
    time.sleep(0.2)
"""

NODE_LABELS = """
import json, ray
ray.init(log_to_driver=False, logging_level="ERROR")
print(json.dumps({n["NodeID"]: n.get("Labels", {}).get("rayfleet.io/group") for n in ray.nodes() if n["Alive"]}))
"""


def recipe(tmp_path: Path, group: str | None, **more) -> Path:
    """A one-node launcher recipe on `group` (None: it names none, and rayfleet chooses); `more`: other keys."""
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "hold.py").write_text(HOLD)
    path = tmp_path / f"{group or 'any'}{'-more' if more else ''}.yaml"
    resources = {"workers": 1, "cpus_per_worker": 1, **({"group": group} if group else {})}
    spec = {"name": "held", "code": "code", "entrypoint": "hold.py", "launcher": "torchrun", **more}
    path.write_text(json.dumps({**spec, "storage": str(tmp_path / "runs"), "resources": resources}))
    return path


def submit(env: dict, path: Path, run: str, *args: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "rayfleet.cli.main", "run", str(path), "--on", "local", "--name", run, "--", *args]
    return subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def until(what, deadline_s: float, why: str) -> None:
    deadline = time.monotonic() + deadline_s
    while not what():
        assert time.monotonic() < deadline, why
        time.sleep(0.3)


def test_a_run_on_a_group_waits_for_that_groups_node_while_the_other_group_is_free(cluster_env, tmp_path):
    """What no unit test can show, on Ray 2.60 itself: the local cluster's nodes carry their group's label;
    a launcher recipe naming group b is placed on b's node (its placement group's bundle label selector); a
    second run naming b is not admitted while b's one node is held, although a's node is free (the queue's
    admission probe asks for b's nodes only; without the selector it would start on a at once), and starts
    on b once the first ends; meanwhile a run naming no group is placed on a, the smallest group that fits, and
    ends before b's line moves (per-group lines, on Ray's own placement); and a run naming b whose recipe allows
    the move to another group (`capacity_fallback: [group]`) leaves b's line for a, where Ray places it (the move
    inside the job's queue wait, its line and record entry). A group the cluster lacks is refused in one line,
    before anything starts."""
    gate, runs = tmp_path / "gate", tmp_path / "runs"
    refused = run_verb(cluster_env, "run", str(recipe(tmp_path, "c")), "--on", "local", "--name", "nogroup")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stderr.strip() == (
        "error: resources.group: the running local cluster has no worker group 'c'; its groups: "
        "a: 1 node(s) x 1 CPU; b: 1 node(s) x 1 CPU"
    )
    assert not (runs / "nogroup").exists()
    first = submit(cluster_env, recipe(tmp_path, "b"), "on-b", str(gate))
    second = None
    try:
        until(lambda: (runs / "on-b" / "node").exists() or first.poll() is not None, 180, "on-b never started")
        second = submit(cluster_env, recipe(tmp_path, "b"), "on-b-too")
        queue = Queue(str(Path(cluster_env["RAYFLEET_STATE_DIR"]) / "cluster"))
        waiting = lambda: (queue.get("on-b-too") or None) and "to be free at once" in queue.get("on-b-too").reason  # noqa: E731
        until(waiting, 120, "the second run on b was not held back by the queue")
        assert not (runs / "on-b-too" / "node").exists()  # a's node was free all along: it did not go there
        # a run naming no group: rayfleet chooses a (both free, the same node; a by name) and, a's line empty,
        # it goes at once and ends while b's line still waits (a full group holds back no other group's run)
        anywhere = submit(cluster_env, recipe(tmp_path, None), "anywhere")
        out_anywhere = anywhere.communicate(timeout=180)[0]
        assert anywhere.returncode == 0, out_anywhere[-3000:]
        assert queue.get("on-b-too") is not None and not (runs / "on-b-too" / "node").exists()
        # a run naming b that allows the move to another group (capacity_fallback: group): it waits in b's line
        # for no minutes, moves to a, where it is placed and ends, while b's line still waits
        allowed = {"capacity_fallback": ["group"], "capacity_fallback_after_min": 0}
        moved = submit(cluster_env, recipe(tmp_path, "b", **allowed), "moved")
        out_moved = moved.communicate(timeout=180)[0]
        assert moved.returncode == 0, out_moved[-3000:]
        assert queue.get("on-b-too") is not None and not (runs / "on-b-too" / "node").exists()
        gate.touch()
        out_first, out_second = first.communicate(timeout=180)[0], second.communicate(timeout=300)[0]
    finally:
        gate.touch()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
    assert first.returncode == 0 and second.returncode == 0, out_first[-3000:] + out_second[-3000:]
    assert "waiting for 1 x 1 CPU to be free at once" in out_second
    labels = json.loads(
        subprocess.run(
            [sys.executable, "-c", NODE_LABELS], env=cluster_env, capture_output=True, text=True, check=True
        ).stdout
    )
    assert sorted(g for g in labels.values() if g) == ["a", "b"]  # the head carries none
    for run in ("on-b", "on-b-too"):
        assert labels[(runs / run / "node").read_text()] == "b", run
    assert labels[(runs / "anywhere" / "node").read_text()] == "a"
    assert "[rayfleet] worker group a: 1 node(s) x 1 CPU (the smallest of 2 that fit)" in out_anywhere
    assert "admitted at once: no other run in the queue" in out_anywhere
    assert json.loads((runs / "anywhere" / "run.json").read_text())["group"] == "a"  # the record says where
    # the move: one line, Ray placed it on a, and its record says where it ran and why it moved
    assert labels[(runs / "moved" / "node").read_text()] == "a"
    assert re.search(
        r"capacity: worker group b: position 2 of 2: behind on-b-too .* for 0 min: the run moves to group a", out_moved
    )
    moved_record = json.loads((runs / "moved" / "run.json").read_text())
    assert moved_record["group"] == "a" and moved_record["state"] == "SUCCEEDED"
    assert [(s["step"], s["group"], s["to"]) for s in moved_record["capacity_steps"]] == [("group", "b", "a")]
