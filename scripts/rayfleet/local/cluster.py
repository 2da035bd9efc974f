"""A real local Ray cluster shaped like the ECS one: a head that trains nothing, N worker nodes.

    rayfleet cluster up [--workers 2] [--cpus-per-worker 1]
    rayfleet cluster status
    rayfleet cluster down
    eval "$(rayfleet cluster env)"                  # then `ray status`, `ray job submit -- python x.py`
    rayfleet cluster run [--workers 2] -- CMD ...   # CMD on the running cluster, or its own

Every node is a separate `ray start --block` process in its own session, started with
`RAY_AUTH_MODE=token` and the machine's token file (rayfleet/core/ray_auth.py). Every process the cluster
starts carries `RAYFLEET_CLUSTER_ID` in its environment; `down` stops exactly those processes (SIGTERM,
then SIGKILL after a grace period), so it never touches another Ray on the machine and still works when
the state file outlives a crash.

Ports: the head's GCS listens on RAYFLEET_RAY_PORT (6390); each node gets its own block of ports above it
(below Ray's worker-port range 10002-19999). Nodes start one after another: two raylets that start in the
same instant pick the same socket name and one of them dies. The dashboard and Jobs API listen on
127.0.0.1 only; Ray 2.60 binds its GCS and raylets to every interface and turns a 127.0.0.1
`--node-ip-address` into the routable address, so those rely on token auth.

Memory: each node advertises its share of the memory that is free when the cluster starts (Ray's default
is the whole host per node), and the session directory and logs are readable by their owner only.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rayfleet.core import local_state, ray_auth, ray_start
from rayfleet.local import gcs_store
from rayfleet.local.host import (
    GIB,
    ClusterError,
    available_memory,
    memory_shares,
    node_env,
    private_dir,
    temp_root,
)
from rayfleet.local.nodes import (
    head_command,
    port_free,
    start_node,
    wait_for_nodes,
    wait_for_warm_servers,
    worker_command,
)
from rayfleet.local.processes import find_cluster_pids, signal_all
from rayfleet.local.spec import ClusterSpec

STOP_GRACE_S = 10


@dataclass
class ClusterState:
    cluster_id: str
    address: str
    dashboard_url: str
    temp_dir: str
    log_dir: str
    spec: dict
    pids: list[int] = field(default_factory=list)
    head_pid: int = 0
    head_memory: int = 0
    store: dict | None = None  # gcs_store.Store's fields, when the GCS is on a store


def state_dir() -> Path:
    return local_state.cluster_dir()


def state_file() -> Path:
    return local_state.cluster_state_file()


def load_state() -> ClusterState | None:
    path = state_file()
    if not path.exists():
        return None
    return ClusterState(**json.loads(path.read_text()))


# Ray's `ray start` gives a new node 30 s to register with its GCS (a constant in ray/_private/node.py); on a
# machine busy with other work (a 2-core CI host building images) the head can miss it once.
RAY_START_TIMED_OUT = "The current node timed out during startup"


def up(spec: ClusterSpec, quiet: bool = False) -> ClusterState:
    """Start the cluster and record it; an already running cluster is an error, not a second start. A node that
    missed Ray's own start-up wait is started again once, with the whole cluster (what was started is stopped)."""
    try:
        return _up_once(spec, quiet)
    except ClusterError as exc:
        if RAY_START_TIMED_OUT not in str(exc):
            raise
    print("a Ray node missed Ray's 30 s start-up wait (a busy machine?); starting the cluster again", flush=True)
    return _up_once(spec, quiet)


def _up_once(spec: ClusterSpec, quiet: bool) -> ClusterState:
    ray_auth.use_token_auth()  # before wait_for_nodes imports ray: Ray reads its auth mode once, at import
    say = (lambda *a: None) if quiet else (lambda *a: print(*a, flush=True))
    existing = load_state()
    if existing and find_cluster_pids(existing.cluster_id, existing.pids):
        raise ClusterError(
            f"a rayfleet cluster is already running at {existing.address}; run `rayfleet cluster down` first"
        )
    if existing:
        _clear(existing)
    ports = (spec.port, spec.dashboard_port, *((spec.port + 8,) if spec.gcs_store else ()))
    busy = [port for port in ports if not port_free(port)]
    if busy:
        raise ClusterError(
            f"port(s) {busy} are in use (another Ray?); stop it or set RAYFLEET_RAY_PORT / RAYFLEET_DASHBOARD_PORT"
        )
    head_memory, worker_memory = memory_shares(available_memory(), spec)
    cluster_id = uuid.uuid4().hex[:12]
    temp_dir = str(private_dir(temp_root()) / str(spec.port))
    log_dir = private_dir(state_dir() / "logs")
    state = ClusterState(
        cluster_id=cluster_id,
        address=f"127.0.0.1:{spec.port}",
        dashboard_url=f"http://127.0.0.1:{spec.dashboard_port}",
        temp_dir=temp_dir,
        log_dir=str(log_dir),
        spec=asdict(spec),
    )
    # Written before anything starts, so `down` finds the processes even if `up` dies half way.
    state.head_memory = head_memory
    _write_state(state)
    env = node_env(cluster_id, state.address)
    try:
        if spec.gcs_store:
            store, pid = gcs_store.start(spec.port + 8, private_dir(state_dir()), env, log_dir)
            state.pids.append(pid)
            state.store = asdict(store)
            env.update(gcs_store.nodes_env())
            say(f"GCS store: redis-server at {store.address} (a killed head can be replaced: replace-head)")
        say(f"starting Ray head (no CPUs for training, {head_memory / GIB:.1f} GiB) at {state.address} ...")
        start_head(state, env)
        wait_for_nodes(state, 1)
        for i in range(spec.workers):
            group, gpus = spec.node_groups()[i]
            what = f"{spec.cpus_per_worker:g} CPU{f', {gpus} GPU' if gpus else ''}, {worker_memory / GIB:.1f} GiB"
            say(f"starting worker {i + 1}/{spec.workers} of group {group} ({what})")
            command, worker_env = worker_command(spec, i, worker_memory), env
            if spec.gcs_store:  # its own session dir, so drivers here attach to it and outlive the head
                own = gcs_store.worker_temp_dir(temp_dir, i)
                command = worker_command(spec, i, worker_memory, gcs_store.worker_resources(), own)
                worker_env = {**env, ray_start.NODE_TEMP_DIR_ENV: own}
            state.pids.append(start_node(f"worker-{i + 1}", command, worker_env, log_dir, warm_dir(state)))
            _write_state(state)
            wait_for_nodes(state, i + 2)
        names = ["head", *(f"worker-{i + 1}" for i in range(spec.workers))]
        slow = wait_for_warm_servers(warm_dir(state), names)
        say(
            f"warm worker processes: {len(names) - len(slow)} of {len(names)} nodes"
            + (f" ({', '.join(slow)} not ready: logs in {log_dir})" if slow else "")
        )
    except BaseException:
        down(quiet=True)
        raise
    say(
        f"cluster up: 1 head + {spec.workers} workers; RAY_ADDRESS={state.address}; "
        f"dashboard {state.dashboard_url} (token auth on)"
    )
    return state


def start_head(state: ClusterState, env: dict, name: str = "head") -> None:
    """Start the head (on the cluster's store, if it has one) and record its pid."""
    spec = ClusterSpec(**state.spec)
    store = gcs_store.Store(**state.store) if state.store else None
    command = head_command(spec, state.temp_dir, state.head_memory, store and store.password())
    env = {**env, **(gcs_store.head_env(store, namespace=state.cluster_id) if store else {})}
    state.head_pid = start_node(name, command, env, Path(state.log_dir), warm_dir(state))
    state.pids.append(state.head_pid)
    _write_state(state)


def warm_dir(state: ClusterState) -> Path:
    """The nodes' fork servers' sockets (rayfleet/core/warm_workers.py), beside the Ray temp dir, so `down`
    clears them with the workers' own temp dirs."""
    return private_dir(Path(f"{state.temp_dir}-warm"))


def _write_state(state: ClusterState) -> None:
    state_file().parent.mkdir(parents=True, exist_ok=True)
    tmp = state_file().with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2))
    tmp.replace(state_file())


def down(quiet: bool = False) -> int:
    """Stop what `up` started (and nothing else); return how many processes were stopped."""
    state = load_state()
    if state is None:
        if not quiet:
            print("no rayfleet cluster recorded; nothing to stop")
        return 0
    pids = find_cluster_pids(state.cluster_id, state.pids)
    signal_all(pids, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and find_cluster_pids(state.cluster_id, state.pids):
        time.sleep(0.3)
    survivors = find_cluster_pids(state.cluster_id, state.pids)
    signal_all(survivors, signal.SIGKILL)
    _clear(state)
    if not quiet:
        forced = f" ({len(survivors)} needed SIGKILL)" if survivors else ""
        print(f"cluster down: stopped {len(pids)} processes{forced}")
    return len(pids)


def _clear(state: ClusterState) -> None:
    # the workers' own temp dirs (gcs_store) and the fork servers' sockets (warm_dir)
    for own in Path(state.temp_dir).parent.glob(f"{Path(state.temp_dir).name}-w*"):
        shutil.rmtree(own, ignore_errors=True)
    shutil.rmtree(state.temp_dir, ignore_errors=True)
    state_file().unlink(missing_ok=True)


def running() -> ClusterState | None:
    """The recorded cluster if its processes are alive."""
    state = load_state()
    if state and find_cluster_pids(state.cluster_id, state.pids):
        return state
    return None


def status() -> str:
    state = load_state()
    if state is None:
        return "no rayfleet cluster recorded (rayfleet cluster up starts one)"
    pids = find_cluster_pids(state.cluster_id, state.pids)
    if not pids:
        return f"cluster {state.cluster_id} is recorded but not running (rayfleet cluster down clears it)"
    groups = "; ".join(f"group {name}: {what}" for name, what in ClusterSpec(**state.spec).group_summary().items())
    return (
        f"cluster {state.cluster_id}: RAY_ADDRESS={state.address}, dashboard {state.dashboard_url}, "
        f"{groups}, {len(pids)} processes, logs in {state.log_dir}"
    )
