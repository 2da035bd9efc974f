"""The local cluster's GCS on an external store: a real `redis-server` (Debian's package) on 127.0.0.1, as the
head on ECS can keep its GCS in ElastiCache (infra/modules/gcs_store), so a killed head is replaced on the same
store and what ran on the workers goes on.

    rayfleet cluster up --gcs-store
    rayfleet cluster replace-head        # SIGKILL the head, start a new one on the same store

Ray 2.60's GCS fault tolerance: with RAY_REDIS_ADDRESS the head's GCS keeps its tables in Redis under
RAY_external_storage_namespace; a new head on the same store and namespace takes the cluster back (nodes,
actors, placement groups, the Jobs API's jobs whose supervisor lives). Every node and driver waits for it up to
RAY_gcs_rpc_server_reconnect_timeout_s instead of Ray's 60 s. What the head itself ran is lost: job drivers
and their supervisors run on a worker node (the `rayfleet_driver` resource, as the trainer task on ECS).

The store's password is a random one in a file of the user's (0600). Ray 2.60 hands it to its GCS server on
the command line (`--redis_password`, Ray's own code); on one host other users could read it from /proc, so
the store listens on 127.0.0.1 only and trusts no one without it.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from rayfleet.local.host import ClusterError, private_dir

# What a node or driver waits for a replaced head before it gives up (Ray's default is 60 s): a head on a busy
# laptop starts again in 10-40 s.
RECONNECT_S = 600
DRIVER_RESOURCE = "rayfleet_driver"  # what a worker node offers job drivers when the head may be replaced
START_TIMEOUT_S = 30
READY_MARK = "Ready to accept connections"


@dataclass(frozen=True)
class Store:
    address: str  # host:port
    password_file: str

    def password(self) -> str:
        return Path(self.password_file).read_text().strip()


def redis_server() -> str:
    found = shutil.which("redis-server")
    if not found:
        raise ClusterError("--gcs-store needs redis-server on PATH (Debian/Ubuntu: apt-get install redis-server)")
    return found


def start(port: int, directory: Path, env: dict, log_dir: Path) -> tuple[Store, int]:
    """Start redis-server on 127.0.0.1:`port` with a new password; its config and password file in `directory`
    (the user's own, 0700). Returns the store and the server's pid."""
    binary = redis_server()
    password = directory / "gcs-store.password"
    password.touch(mode=0o600)
    password.write_text(secrets.token_urlsafe(32))
    config = directory / "gcs-store.conf"
    config.touch(mode=0o600)
    # No persistence of its own: the store outlives heads, not itself (ElastiCache is what survives on ECS).
    config.write_text(
        f'bind 127.0.0.1\nport {port}\nprotected-mode yes\nrequirepass "{password.read_text()}"\n'
        f'save ""\nappendonly no\ndir {directory}\n'
    )
    log_path = log_dir / "gcs-store.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [binary, str(config)], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while READY_MARK not in log_path.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise ClusterError(f"redis-server did not start on 127.0.0.1:{port}; log {log_path}")
        time.sleep(0.1)
    return Store(address=f"127.0.0.1:{port}", password_file=str(password)), proc.pid


def head_env(store: Store, namespace: str) -> dict[str, str]:
    return {"RAY_REDIS_ADDRESS": store.address, "RAY_external_storage_namespace": namespace}


def nodes_env() -> dict[str, str]:
    """For every node and every driver: wait for a replaced head instead of exiting after a minute."""
    return {"RAY_gcs_rpc_server_reconnect_timeout_s": str(RECONNECT_S)}


def worker_temp_dir(head_temp_dir: str, index: int) -> str:
    """A worker node's temp dir of its own, so that a driver there attaches to its raylet by it
    (ray_start.driver_init_kwargs), whose session's logs are the head's: Ray's agents read a job's log from the
    session of the node they attach to, which on one host is the head's, and the head's log monitor forwards
    every node's output (as without a store). Made after the head started: the session is named by it."""
    head = Path(head_temp_dir)
    own = private_dir(head.with_name(f"{head.name}-w{index + 1}"))
    session = (head / "session_latest").resolve()
    (own / session.name).mkdir(exist_ok=True)
    logs = own / session.name / "logs"
    if not logs.is_symlink():
        logs.symlink_to(session / "logs", target_is_directory=True)
    return str(own)


def worker_resources() -> dict[str, float]:
    """What each worker node offers job drivers: a job's supervisor and driver there outlive the head."""
    return {DRIVER_RESOURCE: 100}


def driver_resources() -> dict[str, float]:
    """A Jobs API submission's entrypoint_resources on such a cluster."""
    return {DRIVER_RESOURCE: 1}
