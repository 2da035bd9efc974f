"""Autostop, decided beside the head: idle GPUs scale to zero by themselves.

The control task, `ray-control` (rayfleet/node/control/head_snapshot.py), asks the head every 30 s what runs;
with each snapshot it asks `Autostop.tick` too. The cluster is busy while Ray has a job that is not finished
(a recipe's submission or a job's driver), a Serve application is up or `make serve` kept one (a head that
started again without it gets it back: rayfleet/core/serve_kept.py), or a trainer task of this cluster runs
(it may still be pulling its image, not yet a Ray job), or a run waits for a driver slot. Not work: a run
the hang watchdog holds hung (only by a marker its own job made: rayfleet/core/hung_runs.py), a Serve
application that failed to deploy, or one unhealthy for longer than the grace (15 min).
Once the cluster has been idle for
RAYFLEET_AUTOSTOP_IDLE_MIN minutes (default 30; 0 turns autostop off) the worker service goes to zero, and
the head service too when RAYFLEET_AUTOSTOP_HEAD is true; the capacity providers then remove the instances.
The control task's role may update exactly those services (infra/modules/iam). `make start`, or `make run`
on a stopped deployment, brings them back (rayfleet/ecs/start.py); so may the queue's capacity
(rayfleet/node/control/queue_scaling.py). Whoever raises a stopped service, autostop re-arms: it stops it again once
the cluster is idle long enough. What it decided goes into the snapshot, so `make status` shows when the
workers will stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from rayfleet.core import hung_runs
from rayfleet.core.aws import STARTED_BY

DEFAULT_IDLE_MIN = 30.0
UNFINISHED_JOBS = ("PENDING", "RUNNING")
# Serve's application states that are work. UNHEALTHY is work for a while only (Settings.unhealthy_grace_s): Serve
# replaces a failed replica by itself within minutes, but an application that fails its health checks longer
# than that is not coming back without a new config. DEPLOY_FAILED is no work at all: Serve gave up deploying
# it and retries nothing until someone deploys again, so GPUs held for it serve nobody.
SERVING = ("DEPLOYING", "RUNNING")
UNHEALTHY = "UNHEALTHY"
FAILED = "DEPLOY_FAILED"
DEFAULT_UNHEALTHY_GRACE_S = 15 * 60


def busy_because(snapshot: dict, trainer_tasks: int, failed_apps: frozenset[str] = frozenset()) -> str | None:
    """Why the cluster is not idle (a short phrase), or None when it is. A run the hang watchdog holds hung
    (a marker of the job itself among `hung_markers`, rayfleet/core/hung_runs.py) is no work: its Ray job,
    and on ECS its trainer task, are not counted. `failed_apps`: Serve applications that are no work (failed
    to deploy, or unhealthy past the grace: Autostop.failed_apps), also when `make serve` kept them."""
    jobs = [j for j in snapshot.get("jobs") or [] if j.get("status") in UNFINISHED_JOBS]
    hung = len(hung_runs.held(snapshot.get("hung_markers") or [], jobs))
    if len(jobs) > hung:
        return f"{len(jobs) - hung} Ray job(s) running" + (f" ({hung} more hung)" if hung else "")
    apps = snapshot.get("serve") or []
    serving = [a["name"] for a in apps if a.get("status") in (*SERVING, UNHEALTHY) and a["name"] not in failed_apps]
    if serving:
        return f"serving {', '.join(serving)}"
    kept = snapshot.get("serve_kept") or {}
    kept_apps = set(kept.get("applications") or [])
    if "run" in kept and not (kept_apps and kept_apps <= failed_apps):  # `make serve` kept a config
        # (rayfleet/core/serve_kept.py): serving, even on a head that lost it, unless every one of its apps failed
        return f"serving run {kept['run']} (kept: rayfleet serve down ends it)"
    if "error" in kept:  # it may be serving: never scale that to zero on a guess
        return f"maybe serving (the kept Serve config is unreadable: {kept['error']})"
    if trainer_tasks > hung:
        return f"{trainer_tasks - hung} trainer task(s) running"
    waiting = (snapshot.get("launches") or {}).get("waiting")
    if waiting:  # behind a hung run's trainer, say (rayfleet/node/control/driver_dispatch.py): work that will start
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
    unhealthy_grace_s: float = DEFAULT_UNHEALTHY_GRACE_S

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
        self.unhealthy_since: dict[str, float] = {}  # Serve application -> first seen UNHEALTHY (this spell)

    def trainer_tasks(self) -> int:
        listed = self.ecs.list_tasks(cluster=self.settings.cluster, startedBy=STARTED_BY, desiredStatus="RUNNING")
        return len(listed["taskArns"])

    def services(self) -> list[str]:
        services = [self.settings.worker_service]
        if self.settings.stop_head:  # then nothing is left to watch: this task's own service goes last
            services += [self.settings.head_service] + [s for s in [self.settings.control_service] if s]
        return services

    def rearm(self, why: str) -> None:
        """Someone raised a service autostop had stopped (the queue's capacity, `make start`, by hand): stop it
        again once idle long enough, counted from now."""
        if self.stopped:
            self.stopped, self.idle_since = False, self.clock()
            self.say(f"autostop: {why}: stops again after {self.settings.idle_s / 60:g} idle minutes")

    def raised_since_stop(self) -> str | None:
        """A service autostop scaled to zero that now wants tasks again (None: none)."""
        scaled = [s for s in self.services() if s != self.settings.control_service]  # this task runs: it is up
        found = self.ecs.describe_services(cluster=self.settings.cluster, services=scaled)["services"]
        up = [f"{s['serviceName']} at {s['desiredCount']}" for s in found if s.get("desiredCount", 0) > 0]
        return ", ".join(up) or None

    def failed_apps(self, snapshot: dict, now: float) -> frozenset[str]:
        """Serve applications that are no work: DEPLOY_FAILED, or UNHEALTHY for longer than the grace."""
        apps = {a.get("name"): a.get("status") for a in snapshot.get("serve") or []}
        for name in [n for n in self.unhealthy_since if apps.get(n) != UNHEALTHY]:
            del self.unhealthy_since[name]  # recovered, or gone: a later spell starts its own grace
        for name, status in apps.items():
            if status == UNHEALTHY:
                self.unhealthy_since.setdefault(name, now)
        grace = self.settings.unhealthy_grace_s
        return frozenset(
            name
            for name, status in apps.items()
            if status == FAILED or (status == UNHEALTHY and now - self.unhealthy_since[name] >= grace)
        )

    def tick(self, snapshot: dict) -> dict:
        """Called with each snapshot: stop the services once idle long enough; return what to show."""
        now = self.clock()
        if self.stopped:  # re-armed whoever raised them: else they would run until the next busy spell ends
            raised = self.raised_since_stop()
            if raised:
                self.rearm(f"{raised} since it stopped them")
        failed = self.failed_apps(snapshot, now)
        busy = busy_because(snapshot, self.trainer_tasks(), failed)
        shown = {"idle_min": self.settings.idle_s / 60}
        if failed:  # said in the snapshot, so `make status` shows why an application does not keep the GPUs
            shown["not_work"] = [f"Serve application {name}: failed or unhealthy too long" for name in sorted(failed)]
        if busy is not None:
            self.idle_since, self.stopped = None, False
            return {**shown, "busy": busy}
        if self.idle_since is None:
            self.idle_since = now
        at = self.idle_since + self.settings.idle_s
        services = self.services()
        if now >= at and not self.stopped:
            for service in services:  # workers first, then the head, then this task's own service
                self.ecs.update_service(cluster=self.settings.cluster, service=service, desiredCount=0)
            self.stopped = True
            self.say(f"autostop: idle for {(now - self.idle_since) / 60:.0f} min: {', '.join(services)} scaled to 0")
        return {
            **shown,
            "idle_since": iso(self.idle_since),
            "stops_at": iso(at),
            "stops": services,
            "stopped": self.stopped,
        }


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
