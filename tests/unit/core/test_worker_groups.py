"""The worker-group contract: a group's name, its nodes' Ray label, the selector of work placed on it, and the
one-line refusal of a group a cluster does not have."""

from __future__ import annotations

import pytest

from rayfleet.core import ray_start, worker_groups
from rayfleet.core.errors import ConfigError


@pytest.mark.parametrize("name", ["a", "default", "large-4gpu", "g5-xlarge", "x" * 63])
def test_a_group_name_is_a_ray_label_value(name):
    assert worker_groups.check_name(name) == name
    assert worker_groups.node_labels(name) == {"rayfleet.io/group": name}
    assert worker_groups.selector(name) == {"rayfleet.io/group": name}


@pytest.mark.parametrize("name", ["", "Large", "-a", "a-", "a_b", "a.b", "a=b", "a,b", "x" * 64, None, 3])
def test_what_is_no_group_name_is_refused_in_one_line(name):
    with pytest.raises(ConfigError, match="a name is 1-63 lower-case letters"):
        worker_groups.check_name(name)


def test_no_group_places_anywhere_and_the_environment_names_it():
    assert worker_groups.selector(None) is None
    assert worker_groups.from_env({}) is None and worker_groups.from_env({"RAYFLEET_WORKER_GROUP": ""}) is None
    assert worker_groups.from_env({"RAYFLEET_WORKER_GROUP": "small"}) == "small"
    with pytest.raises(ConfigError):
        worker_groups.from_env({"RAYFLEET_WORKER_GROUP": "a,rayfleet.io/group=b"})  # no second label smuggled in


def test_a_node_command_carries_its_labels_as_ray_start_takes_them():
    cmd = ray_start.command(address="h:6379", labels=worker_groups.node_labels("small"))
    assert "--labels=rayfleet.io/group=small" in cmd
    assert not [c for c in ray_start.command(address="h:6379") if c.startswith("--labels")]


def test_a_placement_groups_bundles_select_the_group_or_nothing():
    assert worker_groups.bundle_selectors("b", 2) == {"bundle_label_selector": [{"rayfleet.io/group": "b"}] * 2}
    assert worker_groups.bundle_selectors(None, 2) == {}
