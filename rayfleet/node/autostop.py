"""Autostop, decided beside the head: idle GPUs scale to zero by themselves.

The control task, `ray-control` (rayfleet/node/head_snapshot.py), asks the head every 30 s what runs;
with each snapshot it asks `Autostop.tick` too. The cluster is busy while Ray has a job that is not finished
(a recipe's submission or a job's driver), a Serve application is up or `make serve` kept one (a head that
started again without it gets it back: rayfleet/serve/kept.py), or a trainer task of this cluster runs
(it may still be pulling its image, not yet a Ray job), or a run waits for a driver slot; a run the hang
watchdog holds hung does not count.
Once the cluster has been idle for
RAYFLEET_AUTOSTOP_IDLE_MIN minutes (default 30; 0 turns autostop off) the worker service goes to zero, and
the head service too when RAYFLEET_AUTOSTOP_HEAD is true; the capacity providers then remove the instances.
The head task's role may update exactly those two services (infra/modules/iam). `make start`, or `make run`
on a stopped deployment, brings them back (rayfleet/ecs/start.py). What it decided goes into the snapshot,
so `make status` shows when the workers will stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from rayfleet.core.aws import STARTED_BY

DEFAULT_IDLE_MIN = 30.0
UNFINISHED_JOBS = ("PENDING", "RUNNING")
SERVING = ("DEPLOYING", "RUNNING", "UNHEALTHY", "DEPLOY_FAILED")


def busy_because(snapshot: dict, trainer_tasks: int) -> str | None:
    """Why the cluster is not idle (a short phrase), or None when it is. A run the hang watchdog holds hung
    (`hung_runs` of the snapshot) is no work: its Ray job, and on ECS its trainer task, are not counted."""
    hung = len(snapshot.get("hung_runs") or [])
    jobs = [j for j in snapshot.get("jobs") or [] if j.get("status") in UNFINISHED_JOBS]
    if len(jobs) > hung:
        return f"{len(jobs) - hung} Ray job(s) running" + (f" ({hung} more hung)" if hung else "")
    serving = [a["name"] for a in snapshot.get("serve") or [] if a.get("status") in SERVING]
    if serving:
        return f"serving {', '.join(serving)}"
    kept = snapshot.get("serve_kept") or {}
    if "run" in kept:  # `make serve` kept a config (rayfleet/serve/kept.py): serving, even on a head that lost it
        return f"serving run {kept['run']} (kept: make serve-down ends it)"
    if "error" in kept:  # it may be serving: never scale that to zero on a guess
        return f"maybe serving (the kept Serve config is unreadable: {kept['error']})"
    if trainer_tasks > hung:
        return f"{trainer_tasks - hung} trainer task(s) running"
    waiting = (snapshot.get("launches") or {}).get("waiting")
    if waiting:  # behind a hung run's trainer, say (rayfleet/node/driver_dispatch.py): work that will start
        return f"{waiting} run(s) waiting for a driver slot"
    return None


@dataclass
class Settings:
    cluster: str
    head_service: str
    worker_service: str
    idle_s: float = DEFAULT_IDLE_MIN * 60
    stop_head: bool = False
    control_service: str | None = None  # this task's own service, stopped after the head (it holds its instance)

    @classmethod
    def from_env(cls, env: dict) -> Settings | None:
        """None when the task was not given its services (outside ECS) or autostop is off."""
        names = [env.get(k) for k in ("RAYFLEET_CLUSTER_NAME", "RAYFLEET_HEAD_SERVICE", "RAYFLEET_WORKER_SERVICE")]
        idle_min = float(env.get("RAYFLEET_AUTOSTOP_IDLE_MIN") or DEFAULT_IDLE_MIN)
        if not all(names) or idle_min <= 0:
            return None
        stop_head = (env.get("RAYFLEET_AUTOSTOP_HEAD") or "false").lower() == "true"
        return cls(
            *names, idle_s=idle_min * 60, stop_head=stop_head, control_service=env.get("RAYFLEET_CONTROL_SERVICE")
        )


class Autostop:
    def __init__(self, settings: Settings, ecs, clock: Callable[[], float] = time.time, say=print):
        self.settings, self.ecs, self.clock, self.say = settings, ecs, clock, say
        self.idle_since: float | None = None
        self.stopped = False

    def trainer_tasks(self) -> int:
        listed = self.ecs.list_tasks(cluster=self.settings.cluster, startedBy=STARTED_BY, desiredStatus="RUNNING")
        return len(listed["taskArns"])

    def tick(self, snapshot: dict) -> dict:
        """Called with each snapshot: stop the services once idle long enough; return what to show."""
        now = self.clock()
        busy = busy_because(snapshot, self.trainer_tasks())
        if busy is not None:
            self.idle_since, self.stopped = None, False
            return {"idle_min": self.settings.idle_s / 60, "busy": busy}
        if self.idle_since is None:
            self.idle_since = now
        at = self.idle_since + self.settings.idle_s
        services = [self.settings.worker_service]
        if self.settings.stop_head:  # then nothing is left to watch: this task's own service goes last
            services += [self.settings.head_service] + [s for s in [self.settings.control_service] if s]
        if now >= at and not self.stopped:
            for service in services:  # workers first, then the head, then this task's own service
                self.ecs.update_service(cluster=self.settings.cluster, service=service, desiredCount=0)
            self.stopped = True
            self.say(f"autostop: idle for {(now - self.idle_since) / 60:.0f} min: {', '.join(services)} scaled to 0")
        return {
            "idle_min": self.settings.idle_s / 60,
            "idle_since": iso(self.idle_since),
            "stops_at": iso(at),
            "stops": services,
            "stopped": self.stopped,
        }


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
