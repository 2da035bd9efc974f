"""Recipes: strict schema, one clear error per bad recipe, what fits where, the command built."""

from __future__ import annotations

import re

import pytest

from rayfleet.core.config import ConfigError
from rayfleet.recipes.command import command, job_env
from rayfleet.recipes.fit import Capacity, check_fits
from rayfleet.recipes.schema import load
from tests.unit.recipes.helpers import GOOD, REPO, write


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"epochs": 3}, "epochs: unknown key"),
        ({"resources": {"workers": 2, "gpu": 1}}, "resources.gpu: unknown key"),
        ({"entrypoint": None}, "entrypoint: missing"),
        ({"code": "no-such-dir"}, "code: no-such-dir is not a directory"),
        ({"entrypoint": "missing.py"}, "entrypoint: missing.py is not a file"),
        ({"pip": ["einops"]}, "'einops' is not pinned"),
        ({"pip": ["einops>=0.8"]}, "'einops>=0.8' is not pinned"),
        ({"pip": ["einops==0.*"]}, "is not pinned"),
        ({"name": "My Job"}, "name: String should match pattern"),
        ({"resources": {"workers": 0}}, "resources.workers: Input should be greater than or equal to 1"),
        ({"env": {"A": {"secret": "vault:x"}}}, "is not a secret reference"),
        ({"env": {"RAYFLEET_RUN_NAME": "x"}}, "RAYFLEET_RUN_NAME is set by rayfleet"),
        ({"entrypoint": "-m"}, "-m takes one module name"),
        ({"storage": "s3://"}, "s3:// needs a bucket"),
        ({"retries": -1}, "retries.count: Input should be greater than or equal to 0"),
        ({"retries": {"count": 1, "on": [1]}}, "retries.on: unknown key"),
        ({"priority": 10}, "priority: Input should be less than or equal to 9"),
        ({"priority": -1}, "priority: Input should be greater than or equal to 0"),
    ],
)
def test_bad_recipes_fail_with_one_clear_error(tmp_path, change, expected):
    recipe = {**GOOD, **change}
    if change.get("entrypoint", "") is None:
        del recipe["entrypoint"]
    with pytest.raises(ConfigError) as err:
        load(write(tmp_path, recipe))
    assert expected in str(err.value)
    assert str(err.value).count("\n  ") == 1  # exactly one problem named


def test_a_missing_recipe_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"recipe .*nope\.yaml does not exist"):
        load(tmp_path / "nope.yaml")


def test_pinned_packages_and_overrides_are_accepted(tmp_path):
    loaded = load(write(tmp_path, {**GOOD, "pip": ["einops==0.8.1", "tqdm===4.67.1"]}), ["resources.workers=4"])
    assert loaded.recipe.resources.workers == 4
    assert loaded.code_dir == tmp_path.resolve()
    assert loaded.entry_kind() == "script"


def test_more_gpus_than_a_worker_has_is_refused():
    recipe = load(REPO / "recipes" / "fsdp.yaml").recipe  # 1 GPU per worker
    with pytest.raises(ConfigError, match=r"gpus_per_worker: 1 GPUs, but a worker of this machine has 0"):
        check_fits(recipe, Capacity("this machine", cpus=4, gpus=0, memory_gib=24, nodes=None))
    check_fits(recipe, Capacity("g5.12xlarge", cpus=48, gpus=4, memory_gib=192, nodes=None))


def test_workers_beyond_a_fixed_cluster_are_refused(tmp_path):
    recipe = load(write(tmp_path, {**GOOD, "resources": {"workers": 3, "cpus_per_worker": 1}})).recipe
    with pytest.raises(ConfigError, match=r"3 workers do not fit the local cluster: 2 node\(s\) of 1 hold 2 of"):
        check_fits(recipe, Capacity("the local cluster", cpus=1, gpus=0, memory_gib=None, nodes=2))


def test_command_per_entrypoint_kind(tmp_path):
    variables = job_env(load(write(tmp_path, GOOD)).recipe, "r1", "/runs", "/home/me")
    module = load(write(tmp_path, {**GOOD, "entrypoint": "-m pkg.train", "args": ["lr=${RAYFLEET_RUN_DIR}"]}))
    # The cluster's python forks the driver from the node's warm server (rayfleet/core/warm_workers.py)
    assert command(module.recipe, "/venv/bin/python", variables, ["x y"]).endswith(
        "/venv/bin/python -m rayfleet.node.warm_client -m pkg.train lr=/runs/r1 'x y'"
    )
    script = load(write(tmp_path, {**GOOD, "setup": "pip list"}))
    assert command(script.recipe, "/venv/bin/python", variables, []).endswith(
        "pip list && /venv/bin/python -m rayfleet.node.warm_client train.py"
    )
    torchrun = load(write(tmp_path, {**GOOD, "entrypoint": "torchrun --nproc-per-node 2 train.py"}))
    built = command(torchrun.recipe, "/venv/bin/python", variables, [])
    assert built.startswith("export PATH=/venv/bin:") and built.endswith("torchrun --nproc-per-node 2 train.py")
    with_pip = load(write(tmp_path, {**GOOD, "pip": ["einops==0.8.1"]}))  # Ray's job virtualenv is on PATH: fresh
    assert command(with_pip.recipe, "/venv/bin/python", variables, []) == "python train.py"
    typo = load(write(tmp_path, {**GOOD, "args": ["${RAYFLEET_RUNDIR}"]}))
    with pytest.raises(ConfigError, match="unknown variable 'RAYFLEET_RUNDIR'"):
        command(typo.recipe, "/venv/bin/python", variables, [])


def test_retries_as_a_count_or_with_the_exit_codes_that_count(tmp_path):
    plain = load(write(tmp_path, {**GOOD, "retries": 2})).recipe.retries
    assert plain.count == 2 and plain.allows(1) and plain.allows(137)
    assert not any(plain.allows(code) for code in (0, 2, 130, 143))  # success, bad input, a stop
    named = load(write(tmp_path, {**GOOD, "retries": {"count": 1, "exit_codes": [75]}}), ["retries.count=3"])
    assert named.recipe.retries.count == 3 and named.recipe.retries.allows(75) and not named.recipe.retries.allows(1)
    assert load(write(tmp_path, GOOD)).recipe.retries.count == 0


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ("4-2", "workers: 4-2 is the wrong way round: the minimum comes first (2-4)"),
        ("two", "workers: 'two' is neither a number nor a range"),
        ("0-2", "min_workers"),
    ],
)
def test_a_bad_worker_range_is_one_line(tmp_path, workers, message):
    with pytest.raises(ConfigError, match=re.escape(message)) as refused:
        load(write(tmp_path, {**GOOD, "resources": {"workers": workers}}))
    assert len(str(refused.value).splitlines()) == 2  # the file, then one line for the one error


def test_elastic_workers_reach_the_job_and_a_launcher_refuses_them(tmp_path):
    from rayfleet.recipes.command import job_env

    recipe = load(write(tmp_path, GOOD), ["resources.workers=1-2"]).recipe
    assert (recipe.resources.min_workers, recipe.resources.workers, recipe.resources.fewest) == (1, 2, 1)
    env = job_env(recipe, "r", str(tmp_path), str(tmp_path))
    assert (env["RAYFLEET_MIN_WORKERS"], env["RAYFLEET_NUM_WORKERS"]) == ("1", "2")
    assert job_env(load(write(tmp_path, GOOD)).recipe, "r", "s", "l")["RAYFLEET_MIN_WORKERS"] == "2"
    with pytest.raises(ConfigError, match="elastic, which only Ray Train runs are; a torchrun run has a fixed set"):
        load(write(tmp_path, {**GOOD, "launcher": "torchrun", "resources": {"workers": "2-4"}}))


def test_an_elastic_run_fits_when_its_minimum_does_and_asks_for_no_more_nodes_than_there_are(tmp_path):
    from rayfleet.recipes.fit import nodes_needed

    cluster = Capacity("the local cluster", cpus=1, gpus=0, memory_gib=None, nodes=2)
    elastic = load(write(tmp_path, {**GOOD, "resources": {"workers": "2-8"}})).recipe
    check_fits(elastic, cluster)
    assert nodes_needed(elastic, cluster) == 2
    with pytest.raises(ConfigError, match=r"resources\.workers: 3 workers do not fit the local cluster"):
        check_fits(load(write(tmp_path, {**GOOD, "resources": {"workers": "3-8"}})).recipe, cluster)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("max_hours: .inf\n", "max_hours: Input should be a finite number"),
        ("max_cost_usd: .nan\n", "max_cost_usd: Input should be a finite number"),
        ("max_hours: 100000\n", "max_hours: Input should be less than or equal to 8784"),
        ("resources: {cpus_per_worker: 1e300}\n", "resources.cpus_per_worker: Input should be less than or equal to"),
        ("resources: {memory_per_worker_gib: .inf}\n", "resources.memory_per_worker_gib: Input should be a finite"),
        ("notify: {stall_after_s: .inf}\n", "notify.stall_after_s: Input should be a finite number"),
    ],
)
def test_numbers_are_finite_and_bounded(tmp_path, text, expected):
    """Issue 54 R10: `.inf` is YAML for infinity, and `gt=0` alone let it (and 1e300) through."""
    path = write(tmp_path, GOOD)  # and train.py
    path.write_text("name: job\nentrypoint: train.py\n" + text)
    with pytest.raises(ConfigError) as err:
        load(path)
    assert expected in str(err.value) and str(err.value).count("\n  ") == 1


def test_a_key_said_twice_and_a_file_that_is_not_utf8_are_one_line_each(tmp_path):
    """Issue 54 R8 and R10: PyYAML kept the last of two keys silently; bytes that are not UTF-8 gave a traceback."""
    path = write(tmp_path, GOOD)
    path.write_text("name: job\nentrypoint: train.py\nmax_hours: 1\nmax_hours: 100\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML: key 'max_hours' appears twice \(line 4, column 1\)$"):
        load(path)
    path.write_text("name: job\nentrypoint: train.py\nresources: {workers: 2, workers: 3}\n")
    with pytest.raises(ConfigError, match="key 'workers' appears twice"):
        load(path)
    path.write_text("base: &b {workers: 2}\nname: job\nentrypoint: train.py\nresources: {<<: *b, workers: 3}\n")
    with pytest.raises(ConfigError, match="base: unknown key"):  # a merge key's values may be overridden
        load(path)
    path.write_bytes(b"name: caf\xe9\nentrypoint: train.py\n")
    with pytest.raises(ConfigError) as err:
        load(path)
    assert str(err.value) == f"recipe {path} is not UTF-8 text (byte 9: 0xe9)"


def test_the_cli_says_a_bad_recipe_file_in_one_line_and_exits_2(tmp_path, capsys):
    from rayfleet.cli import main as cli

    path = write(tmp_path, GOOD)
    for body in (b"name: caf\xe9\n", b"name: job\nname: job\n", b"name: [unclosed\n"):
        path.write_bytes(body)
        assert cli.main(["run", str(path), "--on", "local"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: recipe {path} is not ") and err.count("\n") == 1 and "Traceback" not in err


def test_a_recipe_may_name_its_worker_group_and_its_job_gets_it(tmp_path):
    from rayfleet.core.worker_groups import GROUP_VAR
    from rayfleet.recipes.admission import entry_for
    from rayfleet.recipes.command import job_env

    recipe = load(write(tmp_path, GOOD), ["resources.group=large"]).recipe
    assert recipe.resources.group == "large"
    assert job_env(recipe, "r", "s", "l")[GROUP_VAR] == "large"
    assert entry_for(recipe, "r").group == "large"  # its admission probes that group's nodes
    plain = load(write(tmp_path, GOOD)).recipe
    assert GROUP_VAR not in job_env(plain, "r", "s", "l") and entry_for(plain, "r").group == ""
    with pytest.raises(ConfigError, match="a name is 1-63 lower-case letters"):
        load(write(tmp_path, GOOD), ["resources.group=Large"])
    with pytest.raises(ConfigError, match=GROUP_VAR):  # set by rayfleet, never by the recipe
        load(write(tmp_path, {**GOOD, "env": {GROUP_VAR: "large"}}))
