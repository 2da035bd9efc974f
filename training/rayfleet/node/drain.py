"""A worker node that is about to go drains itself first, so the jobs on it checkpoint and move elsewhere.

Two warnings reach an ECS worker before its instance goes: ECS's SIGTERM (any StopTask, and a Spot
interruption once ECS drains the instance: ECS_ENABLE_SPOT_INSTANCE_DRAINING), followed by SIGKILL after the
container's stopTimeout (120 s); and on Spot the two-minute interruption notice, which the instance's own
poller reads from IMDS (no container may reach IMDS) into /etc/rayfleet/spot-action.json, mounted read-only
into the worker. On either, the entry point (rayfleet/node/ray_node.py) asks Ray's GCS to drain its own
node with the PREEMPTION reason and a deadline inside the time left (`ray drain-node`, Ray's own CLI). Ray
then schedules nothing new there, and Ray Train sees the notice (`ray.train.get_preemption_info()`), saves
a checkpoint and restarts the run elsewhere at the deadline (rayfleet/train/control/preemption.py). The entry point
stops
Ray when the node's work is gone or the deadline has passed, whichever comes first.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path

import psutil

STOP_TIMEOUT_S = 120  # the task definitions' stopTimeout: SIGKILL comes this long after SIGTERM
DEFAULT_DEADLINE_S = 100  # of those, what Ray may use; the rest is for Ray itself to stop
SPOT_MARGIN_S = 15  # a Spot notice's deadline: this long before the instance is taken
SPOT_NOTICE_FILE = "/etc/rayfleet/spot-action.json"
# What every raylet runs below itself whatever the node does (ray._private.ray_constants.AGENT_PROCESS_LIST):
# never work, or a drained node would always wait out its whole deadline.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


def own_node_id(ray_start_pid: int) -> str | None:
    """The Ray node id of the raylet that `ray start` (this pid) runs: its --node_id= argument."""
    try:
        processes = psutil.Process(ray_start_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return None
    for process in processes:
        try:
            for arg in process.cmdline():
                if arg.startswith("--node_id="):
                    return arg.split("=", 1)[1]
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return None


def busy_workers(ray_start_pid: int) -> int:
    """Ray worker processes below this node that run a task or an actor (idle ones are named ray::IDLE; Ray's
    own agents are not work)."""
    busy = 0
    try:
        processes = psutil.Process(ray_start_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return 0
    for process in processes:
        try:
            title = " ".join(process.cmdline()[:1])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if title.startswith("ray::") and not title.startswith(("ray::IDLE", *RAY_AGENTS)):
            busy += 1
    return busy


def spot_notice(path: Path, now: float | None = None) -> tuple[str, float] | None:
    """The Spot interruption notice the instance's poller wrote: (what it says, seconds until the instance
    goes). None when there is none (on-demand instances, or no interruption)."""
    try:
        notice = json.loads(path.read_text())
        when = datetime.fromisoformat(notice["time"].replace("Z", "+00:00")).timestamp()
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # unreadable, or not IMDS's notice
        return None
    left = when - (time.time() if now is None else now)
    return f"Spot interruption notice: {notice.get('action', 'terminate')} at {notice['time']}", left


def deadline_for(left_s: float | None, default_s: float) -> int:
    """Seconds Ray may use: the default after SIGTERM, or a Spot notice's time left less a margin."""
    if left_s is None:
        return int(default_s)
    return int(max(min(default_s, left_s - SPOT_MARGIN_S), 1))


def wait_until_idle(ray_start_pid: int, deadline_s: float, settle_s: float = 10.0, clock=time.monotonic) -> str:
    """After the drain: until the node's work is gone (once Ray Train has had `settle_s` to notice) or the
    deadline passes. Returns which."""
    started = clock()
    while clock() - started < deadline_s:
        if clock() - started >= settle_s and busy_workers(ray_start_pid) == 0:
            return f"the node's work is gone after {clock() - started:.0f} s"
        time.sleep(1.0)
    return f"the deadline of {deadline_s:.0f} s has passed"
