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

from rayfleet.core import hung_runs, worker_groups
from rayfleet.core.aws import STARTED_BY

DEFAULT_IDLE_MIN = 30.0
HEAD = "head"  # the unit of the head's services (with RAYFLEET_AUTOSTOP_HEAD), beside the worker groups
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


@dataclass(frozen=True)
class GroupStop:
    """A worker group as autostop sees it: its service, the nodes it keeps (its min) and its idle time."""

    service: str
    min_nodes: int = 0
    idle_s: float = DEFAULT_IDLE_MIN * 60


@dataclass
class Settings:
    cluster: str
    head_service: str
    groups: dict[str, GroupStop]
    idle_s: float = DEFAULT_IDLE_MIN * 60  # the head's (stop_head), once every group has stopped
    stop_head: bool = False
    control_service: str | None = None  # this task's own service, stopped after the head (it holds its instance)
    unhealthy_grace_s: float = DEFAULT_UNHEALTHY_GRACE_S

    @classmethod
    def from_env(cls, env: dict) -> Settings | None:
        """None when the task was not given its services (outside ECS) or no group autostops. The deployment's
        idle minutes at 0 keep the head up; each group has its own (Terraform gives a group without its own the
        deployment's), so a group with minutes of its own still stops."""
        names = [env.get(k) for k in ("RAYFLEET_CLUSTER_NAME", "RAYFLEET_HEAD_SERVICE")]
        idle_min = float(env.get("RAYFLEET_AUTOSTOP_IDLE_MIN") or DEFAULT_IDLE_MIN)
        groups = {
            name: GroupStop(g.service, g.min, g.idle_minutes * 60)
            for name, g in worker_groups.ecs_groups_from(env).items()
            if g.idle_minutes > 0
        }
        if not all(names) or not groups:
            return None
        stop_head = (env.get("RAYFLEET_AUTOSTOP_HEAD") or "false").lower() == "true" and idle_min > 0
        # the head stops last, and only where every group stops at zero: else workers would run on without a head
        kept = [n for n, g in worker_groups.ecs_groups_from(env).items() if g.min > 0 or g.idle_minutes <= 0]
        stop_head = stop_head and not kept
        return cls(
            *names,
            groups,
            idle_s=idle_min * 60,
            stop_head=stop_head,
            control_service=env.get("RAYFLEET_CONTROL_SERVICE"),
        )


def groups_in_use(snapshot: dict, trainer_tasks: int) -> set[str] | None:
    """The worker groups a busy cluster's work is on, when all of it is queued runs on groups: every unfinished
    Ray job and every trainer task can be one of theirs (the queue's capacity counts each group's live runs,
    rayfleet/node/control/queue_scaling.py). None: work that cannot be placed on a group (a Serve application, a
    plain driver, a trainer task not yet queued), so every group counts as busy."""
    capacity = snapshot.get("queue_capacity")
    if not isinstance(capacity, dict) or not capacity or any(not isinstance(c, dict) for c in capacity.values()):
        return None
    runs = {g: int(c.get("runs") or 0) for g, c in capacity.items()}
    jobs = [j for j in snapshot.get("jobs") or [] if j.get("status") in UNFINISHED_JOBS]
    if snapshot.get("serve") or (snapshot.get("serve_kept") or {}) or (snapshot.get("launches") or {}).get("waiting"):
        return None
    if len(jobs) > sum(runs.values()) or trainer_tasks > sum(runs.values()):
        return None
    return {g for g, n in runs.items() if n > 0}


class Autostop:
    def __init__(self, settings: Settings, ecs, clock: Callable[[], float] = time.time, say=print):
        self.settings, self.ecs, self.clock, self.say = settings, ecs, clock, say
        self.idle_since: dict[str, float | None] = dict.fromkeys(settings.groups)  # per group; HEAD: the head's
        self.stopped: dict[str, bool] = dict.fromkeys(settings.groups, False)
        if settings.stop_head:
            self.idle_since[HEAD], self.stopped[HEAD] = None, False
        self.unhealthy_since: dict[str, float] = {}  # Serve application -> first seen UNHEALTHY (this spell)

    def trainer_tasks(self) -> int:
        listed = self.ecs.list_tasks(cluster=self.settings.cluster, startedBy=STARTED_BY, desiredStatus="RUNNING")
        return len(listed["taskArns"])

    def services(self, unit: str) -> list[tuple[str, int]]:
        """(service, count) that stopping `unit` sets: a group's service to its min; the head's (and then this task's
        own service, last)."""
        if unit != HEAD:
            group = self.settings.groups[unit]
            return [(group.service, group.min_nodes)]
        return [(self.settings.head_service, 0)] + [(s, 0) for s in [self.settings.control_service] if s]

    def idle_s(self, unit: str) -> float:
        return self.settings.idle_s if unit == HEAD else self.settings.groups[unit].idle_s

    def rearm(self, why: str, units: list[str] | None = None) -> None:
        """Someone raised a service autostop had stopped (the queue's capacity, `make start`, by hand): stop it
        again once idle long enough, counted from now."""
        for unit in units if units is not None else list(self.stopped):
            if self.stopped.get(unit):
                self.stopped[unit], self.idle_since[unit] = False, self.clock()
                self.say(f"autostop: {why}: {unit} stops again after {self.idle_s(unit) / 60:g} idle minutes")

    def raised_since_stop(self) -> dict[str, str]:
        """Units autostop stopped whose service now wants more tasks than it left (unit -> what it found)."""
        units = {s: (u, n) for u in self.stopped if self.stopped[u] for s, n in self.services(u)}
        units.pop(self.settings.control_service, None)  # this task runs: it is up
        if not units:
            return {}
        found = self.ecs.describe_services(cluster=self.settings.cluster, services=list(units))["services"]
        raised = {}
        for s in found:
            unit, left = units.get(s["serviceName"], (None, 0))
            if unit is not None and s.get("desiredCount", 0) > left:
                raised[unit] = f"{s['serviceName']} at {s['desiredCount']}"
        return raised

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
        """Called with each snapshot: stop each idle group (then the head) once idle long enough; what to show."""
        now = self.clock()
        for unit, what in self.raised_since_stop().items():  # re-armed: else it would run until the next busy spell
            self.rearm(f"{what} since it stopped it", [unit])
        failed = self.failed_apps(snapshot, now)
        trainers = self.trainer_tasks()
        busy = busy_because(snapshot, trainers, failed)
        in_use = groups_in_use(snapshot, trainers) if busy is not None else set()
        shown: dict = {"idle_min": self.settings.idle_s / 60}
        if failed:  # said in the snapshot, so `make status` shows why an application does not keep the GPUs
            shown["not_work"] = [f"Serve application {name}: failed or unhealthy too long" for name in sorted(failed)]
        if busy is not None:
            shown["busy"] = busy
        units = {}
        for unit in self.idle_since:
            working = busy is not None and (unit == HEAD or in_use is None or unit in in_use)
            last = unit != HEAD or all(self.stopped[g] for g in self.settings.groups)  # the head stops last
            units[unit] = self.decide(unit, working, now, may_stop=last)
        return {**shown, "groups": units} if busy is None or in_use is not None else shown

    def decide(self, unit: str, working: bool, now: float, may_stop: bool = True) -> dict:
        if working:
            self.idle_since[unit], self.stopped[unit] = None, False
            return {"busy": True}
        since = self.idle_since[unit] = self.idle_since[unit] or now
        at = since + self.idle_s(unit)
        services = self.services(unit)
        if now >= at and not self.stopped[unit] and may_stop:
            for service, count in services:
                self.ecs.update_service(cluster=self.settings.cluster, service=service, desiredCount=count)
            self.stopped[unit] = True
            said = ", ".join(f"{s} to {n}" for s, n in services)
            self.say(f"autostop: {unit} idle for {(now - since) / 60:.0f} min: {said}")
        return {
            "idle_since": iso(since),
            "stops_at": iso(at),
            "stops": [s for s, _ in services],
            "stopped": self.stopped[unit],
        }


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
