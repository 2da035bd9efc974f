"""`make train-ddp` / `make train-fsdp` are shortcuts for the built-in recipes: what they forward, read from
`make -n` (the command make would run). Each recipe also runs end to end through its shortcut on the local
cluster: DDP in test_recipe_run_on_local_cluster's budget test, FSDP (fsdp-tiny) as the uninterrupted
DeepSpeed run in test_fsdp_on_local_cluster."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from tests.integration.helpers import REPO


def planned(target: str, *variables: str) -> list[str]:
    """The recipe verb's argv that `make -n target` prints."""
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", target, *variables],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (line,) = [line for line in result.stdout.splitlines() if "-m scripts.recipes.run" in line]
    return shlex.split(line)


@pytest.mark.parametrize(
    ("target", "recipe"),
    [
        ("train-ddp", ["recipes/ddp.yaml"]),
        ("train-fsdp", ["recipes/fsdp.yaml", "--local-recipe", "recipes/fsdp-tiny.yaml"]),
    ],
)
def test_train_targets_forward_target_run_settings_and_args_to_the_recipe_verb(target, recipe):
    argv = planned(target, "TARGET=local", "RUN=r1", "SET=storage=/s resources.workers=2", "ARGS=epochs=1 lr=0.1")
    verb = argv[argv.index("-m") + 1 :]
    assert verb[0] == "scripts.recipes.run"
    assert verb[verb.index("--target") + 1] == "local" and verb[verb.index("--run-name") + 1] == "r1"
    assert [verb[i + 1] for i, a in enumerate(verb) if a == "--set"] == ["storage=/s", "resources.workers=2"]
    at = verb.index(recipe[0])
    assert verb[at : at + len(recipe)] == recipe
    assert verb[verb.index("--") + 1 :][-2:] == ["epochs=1", "lr=0.1"]


def test_train_ddp_passes_data_dir_and_bucket_only_when_given():
    given = planned("train-ddp", "DATA_DIR=/d", "BUCKET=b")
    assert "data_dir=/d" in given and "storage=s3://b/runs" in given and "RAYFLEET_RESULTS_BUCKET=b" in given
    plain = planned("train-ddp")
    assert not [a for a in plain if a.startswith(("data_dir=", "storage=", "RAYFLEET_RESULTS_BUCKET"))]
