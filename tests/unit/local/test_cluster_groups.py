"""The local cluster's worker groups (`rayfleet cluster up --group NAME=NODES[xGPUS]`): labelled nodes with
logical GPUs, in the order given; without groups, one group `default` of --workers nodes."""

from __future__ import annotations

import pytest

from rayfleet.cli.main import parser
from rayfleet.local.cluster import ClusterSpec
from rayfleet.local.host import ClusterError
from rayfleet.local.nodes import worker_command


def test_groups_make_the_nodes_in_order_each_labelled_with_its_gpus():
    spec = ClusterSpec.from_env(workers=7, groups=[["small", 2, 1], ["large", 1, 4]])
    assert spec.workers == 3  # the groups say how many nodes there are
    assert spec.node_groups() == [("small", 1), ("small", 1), ("large", 4)]
    large = worker_command(spec, 2, 10**9)
    assert "--labels=rayfleet.io/group=large" in large and "--num-gpus=4" in large
    assert "--labels=rayfleet.io/group=small" in worker_command(spec, 0, 10**9)
    assert spec.group_summary() == {"small": "2 node(s) x 1 CPU + 1 GPU", "large": "1 node(s) x 1 CPU + 4 GPU"}


def test_without_groups_every_node_is_in_the_default_group():
    spec = ClusterSpec.from_env(workers=2, gpus_per_worker=0)
    assert spec.node_groups() == [("default", 0), ("default", 0)]
    assert "--labels=rayfleet.io/group=default" in worker_command(spec, 1, 10**9)
    assert ClusterSpec(**{k: v for k, v in vars(spec).items() if k != "groups"}).node_groups() == spec.node_groups()


@pytest.mark.parametrize(
    ("groups", "why"),
    [
        ([["a", 1, 0], ["a", 1, 0]], "each worker group once"),
        ([["Big", 1, 0]], "a name is 1-63"),
        ([["a", 0, 0]], "at least 1 node"),
        ([["a", 51, 0]], "at most 50 local workers"),
    ],
)
def test_a_bad_group_is_refused_before_anything_starts(groups, why):
    with pytest.raises(ClusterError, match=why):
        ClusterSpec.from_env(groups=groups)


def test_the_flag_is_parsed_once_by_the_command(capsys):
    opts = parser().parse_args(["cluster", "up", "--group", "small=2x1", "--group", "large=1x4", "--group", "c=1"])
    assert opts.group == [("small", 2, 1), ("large", 1, 4), ("c", 1, 0)]
    for bad in ("small", "small=two", "Small=1", "s=0", "s=1x65"):
        with pytest.raises(SystemExit) as exc:
            parser().parse_args(["cluster", "up", "--group", bad])
        assert exc.value.code == 2 and "--group" in capsys.readouterr().err
