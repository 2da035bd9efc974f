"""The one `ray start` line (rayfleet/core/ray_start.py), as both of its callers build it: the local cluster's
nodes and the images' nodes differ only in what they pass."""

import json

import pytest

from rayfleet.core import ray_start
from rayfleet.local import cluster, nodes
from rayfleet.node import node_spec


def test_a_head_and_a_joining_node():
    head = ray_start.command(head=True, ports={"gcs": 1, "dashboard": 2}, dashboard_host="127.0.0.1", block=True)
    assert head[:4] == ["ray", "start", "--head", "--block"] and head[-1] == "--disable-usage-stats"
    assert "--port=1" in head and "--dashboard-port=2" in head and "--dashboard-host=127.0.0.1" in head
    join = ray_start.command(address="h:1", worker_ports=(10, 20), custom_resources={"t": 1}, dashboard_host="x")
    assert join[2] == "--address=h:1" and "--min-worker-port=10" in join and "--max-worker-port=20" in join
    assert f"--resources={json.dumps({'t': 1})}" in join and not [f for f in join if f.startswith("--dashboard")]
    with pytest.raises(ValueError):
        ray_start.command(head=True, address="h:1")
    with pytest.raises(ValueError):
        ray_start.command()


def test_both_callers_go_through_it_and_keep_their_differences():
    spec = cluster.ClusterSpec.from_env(workers=1, cpus_per_worker=1, gpus_per_worker=0)
    local_head = nodes.head_command(spec, "/tmp/t", 1 << 30)
    local_worker = nodes.worker_command(spec, 0, 1 << 30)
    assert "--dashboard-host=127.0.0.1" in local_head and f"--port={spec.port}" in local_head
    assert "--include-log-monitor=false" in local_worker and f"--address=127.0.0.1:{spec.port}" in local_worker
    ports = [int(f.split("=")[1]) for f in local_head + local_worker if f.endswith(tuple("0123456789")) and "port" in f]
    assert len(ports) == len(set(ports))  # no two nodes on one host share a port
    ecs_head = node_spec.head_command({"RAYFLEET_OBJECT_STORE_MIB": "100"})
    assert "--dashboard-host=0.0.0.0" in ecs_head and "--num-cpus=0" in ecs_head
    for command in (local_head, local_worker, ecs_head):
        assert command[1] == "start" and command[-1] == "--disable-usage-stats" and "--block" in command
