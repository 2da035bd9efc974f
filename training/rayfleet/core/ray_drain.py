"""The one drain request: ask Ray's GCS to drain a node with the PREEMPTION reason and a deadline, through
Ray's own CLI (`ray drain-node`). Ray then schedules nothing new on the node, Ray Train sees the notice
(`ray.train.get_preemption_info()`) and restarts its workers elsewhere at the deadline. Used by a worker
draining itself (rayfleet/node/drain.py) and by the hang watchdog for a node that did not arrive
(rayfleet/train/control/hang_watch.py)."""

from __future__ import annotations

import subprocess

REASON = "DRAIN_NODE_REASON_PREEMPTION"
MOST_MESSAGE = 1200  # Ray keeps the message as the dead node's state: evidence, not a document


def request(gcs: str, node_id: str, message: str, deadline_s: int) -> str | None:
    """Ask the GCS to drain the node; None when accepted, else why not (one line)."""
    command = [
        "ray",
        "drain-node",
        f"--address={gcs}",
        f"--node-id={node_id}",
        f"--reason={REASON}",
        f"--reason-message={message[:MOST_MESSAGE]}",
        f"--deadline-remaining-seconds={max(deadline_s, 1)}",
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "ray drain-node did not answer within 60 s"
    if result.returncode == 0:
        return None
    lines = [line.strip() for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    return (lines or [f"ray drain-node exited {result.returncode}"])[-1][:300]
