"""Which worker group a run goes to (rayfleet/recipes/group_choice.py): the cheapest that fits, the one the
recipe names, and one line when none can hold it. The groups are the default deployment's two shapes, from
the catalog (rayfleet/core/instance_types.json)."""

from __future__ import annotations

import pytest

from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.core.config import ConfigError
from rayfleet.recipes.fit import Capacity
from rayfleet.recipes.group_choice import Group, choose, on_group
from rayfleet.recipes.schema import load
from tests.unit.recipes.helpers import GOOD, write


def ecs_group(name: str, instance_type: str, nodes: int) -> Group:
    shape = INSTANCE_TYPES[instance_type]
    where = f"the ECS workers ({instance_type})"
    cap = Capacity(where, float(shape["vcpus"]), shape["gpus"], shape["memory_mib"] / 1024, nodes)
    return Group(name, cap, shape["usd_per_hour"], shape["accelerator"], instance_type)


DEFAULT = [ecs_group("ddp", "g5.xlarge", 2), ecs_group("fsdp", "g5.12xlarge", 2)]


def recipe(tmp_path, **resources):
    return load(write(tmp_path, {**GOOD, "resources": resources})).recipe


def test_the_cheapest_group_that_fits_is_chosen_and_the_line_says_why(tmp_path):
    ddp = choose(recipe(tmp_path, workers=2, gpus_per_worker=1), DEFAULT, "this deployment")
    assert (ddp.group.name, ddp.nodes) == ("ddp", 2)  # 2 x $1.006 beats 1 x $5.672
    assert ddp.line == "worker group ddp: 2 node(s) x g5.xlarge, $2.01/h (the cheapest of 2 that fit)"
    four = choose(recipe(tmp_path, workers=4, gpus_per_worker=1, cpus_per_worker=4), DEFAULT, "this deployment")
    assert (four.group.name, four.nodes, four.usd_per_hour) == ("fsdp", 1, 5.672)  # ddp has 2 nodes of 1 GPU
    assert four.line.endswith("(the only one that fits)")


def test_a_named_group_is_used_even_when_another_is_cheaper(tmp_path):
    named = choose(recipe(tmp_path, workers=2, gpus_per_worker=1, group="fsdp"), DEFAULT, "this deployment")
    assert (named.group.name, named.nodes) == ("fsdp", 1) and named.line.endswith("(named by the recipe)")


def test_a_run_no_group_holds_is_refused_in_one_line_naming_each_group(tmp_path):
    with pytest.raises(ConfigError) as exc:
        choose(recipe(tmp_path, workers=16, gpus_per_worker=1), DEFAULT, "this deployment")
    (line,) = str(exc.value).splitlines()
    assert line.startswith("recipe job fits no worker group of this deployment: ddp (2 node(s) x g5.xlarge): ")
    assert "; fsdp (2 node(s) x g5.12xlarge): resources.workers: 16 workers do not fit" in line
    with pytest.raises(ConfigError, match=r"ddp .*: its GPUs are A10G, not H100.*fsdp .*: its GPUs are A10G, not H100"):
        choose(recipe(tmp_path, workers=1, gpus_per_worker=1, accelerator="H100"), DEFAULT, "this deployment")
    with pytest.raises(ConfigError) as exc:
        choose(recipe(tmp_path, group="huge"), DEFAULT, "this deployment")
    assert str(exc.value) == (
        "resources.group: this deployment has no worker group 'huge'; its groups: "
        "ddp: 2 node(s) x g5.xlarge; fsdp: 2 node(s) x g5.12xlarge"
    )


def test_on_free_groups_the_smallest_node_that_fits_wins_and_stand_in_gpus_take_any_accelerator(tmp_path):
    """The local cluster: no prices, logical GPUs standing in for any accelerator."""
    local = [
        Group("large", Capacity("here", 1.0, 4, None, 1), shown="1 CPU + 4 GPU"),
        Group("small", Capacity("here", 1.0, 0, None, 2), shown="1 CPU"),
    ]
    cpu = choose(recipe(tmp_path, workers=1), local, "the running local cluster")
    assert (
        cpu.group.name == "small" and cpu.line == "worker group small: 1 node(s) x 1 CPU (the smallest of 2 that fit)"
    )
    gpu = choose(recipe(tmp_path, workers=1, gpus_per_worker=2, accelerator="a10g"), local, "here")
    assert gpu.group.name == "large" and gpu.line.endswith("(the only one that fits)")


def test_the_choice_becomes_the_runs_group(tmp_path):
    loaded = load(write(tmp_path, {**GOOD, "resources": {"workers": 2}}))
    moved = on_group(loaded, "ddp")
    assert moved.recipe.resources.group == "ddp" and loaded.recipe.resources.group is None
    assert "group: ddp" in moved.recipe.to_yaml()  # what is packaged and recorded


def test_a_run_naming_no_group_that_no_one_group_holds_goes_across_them(tmp_path):
    """The suite's cluster (groups a and b, one 1-CPU node each): a 2-worker run goes to any node, with no
    selector, and says so; named, or with no groups to span, it is refused as before."""
    local = [Group(n, Capacity("here", 1.0, 0, None, 1), shown="1 CPU") for n in ("a", "b")]
    across = choose(recipe(tmp_path, workers=2), local, "the running local cluster")
    assert across.group.name == "" and across.nodes == 2
    assert across.line == (
        "no one worker group holds its 2 node(s): its workers go to any node of a (1 node(s) x 1 CPU), "
        "b (1 node(s) x 1 CPU)"
    )
    assert on_group(load(write(tmp_path, {**GOOD, "resources": {"workers": 2}})), "").recipe.resources.group is None
    with pytest.raises(ConfigError, match="fits no worker group"):
        choose(recipe(tmp_path, workers=2, group="a"), local, "here")
    with pytest.raises(ConfigError, match="fits no worker group"):
        choose(recipe(tmp_path, workers=3), local, "here")  # all of them hold 2
    mixed = [ecs_group("ddp", "g5.xlarge", 2), ecs_group("l4", "g6.xlarge", 2)]
    spans = choose(recipe(tmp_path, workers=3, gpus_per_worker=1), mixed, "here")
    assert spans.group.name == "" and spans.usd_per_hour == pytest.approx(3 * 1.006)  # priced at the dearer node
    with pytest.raises(ConfigError, match=r"l4 .*: its GPUs are L4, not A10G"):  # an A10G run never spans to L4
        choose(recipe(tmp_path, workers=3, gpus_per_worker=1, accelerator="A10G"), mixed, "here")


def test_an_elastic_run_goes_where_its_most_workers_fit_so_it_can_grow(tmp_path):
    """workers 1-2 on the suite's groups (one 1-CPU node each): no one group holds 2, so it goes across them
    and grows when a node frees; a group that holds 2 takes it; a cluster of one group takes it at its fewest."""
    small = [Group(n, Capacity("here", 1.0, 0, None, 1), shown="1 CPU") for n in ("a", "b")]
    elastic = recipe(tmp_path, workers="1-2")
    assert choose(elastic, small, "here").group.name == ""
    with_room = [*small, Group("c", Capacity("here", 1.0, 0, None, 2), shown="1 CPU")]
    assert choose(elastic, with_room, "here").group.name == "c"
    assert choose(elastic, small[:1], "here").group.name == "a"  # it starts at 1 and cannot grow there
