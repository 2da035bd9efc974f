"""`rayfleet run RECIPE --estimate` against the session's moto deployment (IAM enforced, as the operator): the
group it would go to at that group's price, nothing started, and the recipe's past runs on the group (their
records in the bucket) giving the expected time and cost; with none, unknown."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def estimate(env, recipe) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "rayfleet.cli.main", "run", str(recipe), "--on", "ecs", "--estimate"]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_the_estimate_starts_nothing_and_comes_from_the_recipes_past_runs_on_its_group(aws_stack, tmp_path):
    (tmp_path / "train.py").write_text("print('never run')\n")
    recipe = tmp_path / "recipe.yaml"
    spec = {"name": "estimated", "entrypoint": "train.py", "resources": {"workers": 1, "gpus_per_worker": 1}}
    recipe.write_text(yaml.safe_dump(spec))
    s3, bucket = aws_stack["server"].inspector("s3"), aws_stack["outputs"]["results_bucket"]
    ecs, cluster = aws_stack["server"].inspector("ecs"), aws_stack["outputs"]["cluster_name"]
    tasks_before = ecs.list_tasks(cluster=cluster)["taskArns"]

    first = estimate(aws_stack["env"], recipe)
    assert first.returncode == 0, first.stderr[-3000:]
    (group,) = aws_stack["outputs"]["worker_groups"]
    lines = first.stdout.splitlines()
    head = next(line for line in lines if line.startswith("estimate for group"))
    assert head.startswith(f"estimate for group {group} at $") and head.endswith("/hour (advice: nothing was started):")
    assert "  duration: unknown (no ended run of this recipe on this group yet); cost: unknown" in lines
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="runs/estimated").get("Contents", [])
    assert listed == [] and ecs.list_tasks(cluster=cluster)["taskArns"] == tasks_before  # nothing started

    for day, wall in (("01", 600.0), ("02", 1200.0)):  # two ended runs of the recipe on the group
        record = {"recipe": "estimated", "group": group, "state": "SUCCEEDED", "ledger": {"wall_s": wall}}
        s3.put_object(Bucket=bucket, Key=f"runs/estimated-202612{day}-000000/run.json", Body=json.dumps(record))
    second = estimate(aws_stack["env"], recipe)
    assert second.returncode == 0, second.stderr[-3000:]
    price = float(second.stdout.split(" at $", 1)[1].split("/hour", 1)[0])
    assert "  duration: 15.0 min (from 2 past run(s): 10.0-20.0 min)" in second.stdout
    assert f"  cost: ${900 / 3600 * price:.2f} (${600 / 3600 * price:.2f}-${1200 / 3600 * price:.2f})" in second.stdout
