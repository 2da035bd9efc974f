"""The one `ray start` command line, for every node rayfleet starts: the local cluster's head and workers
(rayfleet/local/cluster.py) and the images' head, workers and trainer (rayfleet/node/ray_node.py).

Callers say what differs (head or joining, which ports, which resources, where the dashboard listens); the
flag names, their order and the flags every node gets (no usage stats) live here only.
"""

from __future__ import annotations

import json

# The ports every node pins for itself (the GCS, dashboard and Ray client are the head's), in the order the
# local cluster lays them out above its base port.
NODE_PORTS = (
    "node_manager",
    "object_manager",
    "metrics_export",
    "dashboard_agent_http",
    "dashboard_agent_grpc",
    "runtime_env_agent",
)

# Ray's port flags, by the names infra/catalog/ray_ports.json and the local cluster use.
PORT_FLAGS = {
    "gcs": "--port",
    "node_manager": "--node-manager-port",
    "object_manager": "--object-manager-port",
    "metrics_export": "--metrics-export-port",
    "dashboard_agent_http": "--dashboard-agent-listen-port",
    "dashboard_agent_grpc": "--dashboard-agent-grpc-port",
    "runtime_env_agent": "--runtime-env-agent-port",
    "client": "--ray-client-server-port",
    "dashboard": "--dashboard-port",
}


def command(
    *,
    head: bool = False,
    address: str | None = None,
    ports: dict[str, int] | None = None,
    worker_ports: tuple[int, int] | None = None,
    resources: dict[str, float | int] | None = None,
    custom_resources: dict[str, float] | None = None,
    dashboard_host: str | None = None,
    block: bool = False,
    gcs_store_password: str | None = None,
    extra: list[str] | None = None,
    ray: str = "ray",
    labels: dict[str, str] | None = None,
) -> list[str]:
    """`ray start` for a head (`head=True`) or a node joining `address` (host:port of the GCS).

    resources: num_cpus, num_gpus, memory, object_store_memory (bytes), as Ray's flags name them.
    dashboard_host: the head's dashboard (127.0.0.1 locally; the task's address on ECS, behind its group).
    gcs_store_password: a head whose GCS lives in an external store (RAY_REDIS_ADDRESS in its environment)
    authenticates to it with this; Ray hands it to its gcs_server on the command line in any case.
    extra: flags only one kind of node has (the local cluster's temp dir, its single log monitor).
    labels: the node's Ray labels (a worker node's group: rayfleet/core/worker_groups.py).
    """
    if head == (address is not None):
        raise ValueError("a node is either the head or joins one at an address")
    cmd = [ray, "start", "--head" if head else f"--address={address}"]
    if block:
        cmd.append("--block")
    for name, value in (ports or {}).items():
        cmd.append(f"{PORT_FLAGS[name]}={value}")
    if worker_ports:
        cmd += [f"--min-worker-port={worker_ports[0]}", f"--max-worker-port={worker_ports[1]}"]
    if head and dashboard_host:
        cmd += ["--include-dashboard=true", f"--dashboard-host={dashboard_host}"]
    cmd += [f"--{key.replace('_', '-')}={value}" for key, value in (resources or {}).items()]
    if custom_resources:
        cmd.append(f"--resources={json.dumps(custom_resources)}")
    if labels:
        cmd.append("--labels=" + ",".join(f"{key}={value}" for key, value in labels.items()))
    if head and gcs_store_password:
        cmd.append(f"--redis-password={gcs_store_password}")
    return [*cmd, *(extra or []), "--disable-usage-stats"]


# What Ray's job supervisor gives a job's drivers: the job's runtime_env (a driver's own ray.init runtime_env
# is merged into it, and naming a field both name is an error).
JOB_CONFIG_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"

# A node started with its own temp dir names it here, in the environment its processes inherit (the local
# cluster's workers when its head can be replaced: rayfleet/local/gcs_store.py).
NODE_TEMP_DIR_ENV = "RAYFLEET_NODE_TEMP_DIR"


def driver_init_kwargs(environ: dict) -> dict:
    """`ray.init` arguments that attach a driver to the node it runs on. On one host every node has the same
    address and Ray attaches a driver to the head's raylet, so a driver there dies with the head; by its temp
    dir Ray picks this node's raylet instead. On ECS (a node per task) nothing is needed."""
    temp_dir = environ.get(NODE_TEMP_DIR_ENV)
    return {"_temp_dir": temp_dir} if temp_dir else {}
