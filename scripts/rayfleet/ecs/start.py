"""Bring a stopped deployment back: the head, and worker groups, and wait until Ray sees them.

    rayfleet deploy start [--outputs FILE] [--timeout 1800] [--recipe RECIPE | --group G]

Without --recipe or --group, each worker group comes back to its min (0 by default: its nodes start when a
run needs them); --group G starts G's nodes up to its max; --recipe the nodes that recipe needs, in the group a
run of it would go to.

After `make stop` or an autostop (rayfleet/node/control/autostop.py) the services are at zero; `make run` and
`make train-*` call this first when they find them there. The wait follows Ray's own view, from the head's
snapshot in S3 (rayfleet/node/control/head_snapshot.py): done when a snapshot taken after the start shows the
head and the workers asked for alive. Capacity providers launch the instances; a GPU instance takes minutes,
and an instance that cannot come (no quota, no capacity in the zone) shows only in the Auto Scaling group's
scaling activities: the wait reads them (rayfleet/ecs/capacity.py), says each reason once, and stops at once
on one that waiting cannot fix.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from rayfleet.core.aws import Aws
from rayfleet.core.bucket import RAY_STATUS as RAY_STATUS_KEY
from rayfleet.core.errors import ConfigError, RayfleetError
from rayfleet.core.moved import gone
from rayfleet.ecs import capacity, preflight, preflight_calls
from rayfleet.ecs.fallback import Fallback
from rayfleet.ecs.outputs import Outputs

PROGRESS_EVERY_S = 30


def stopped(ecs, out: Outputs) -> list[str]:
    """The services that are at zero (`make stop`, an autostop): what start brings back."""
    found = ecs.describe_services(cluster=out.cluster_name, services=[out.head_service_name])
    return [s["serviceName"] for s in found["services"] if s.get("status") == "ACTIVE" and s["desiredCount"] == 0]


def workers_ray_sees(snapshot: dict) -> int:
    """Alive worker nodes: not the head, not a trainer's driver node (it offers a rayfleet_trainer_* resource)."""
    return sum(
        1
        for n in snapshot.get("nodes") or []
        if n["alive"] and not n.get("head") and not any(k.startswith("rayfleet_trainer_") for k in n["resources"])
    )


def read_snapshot(s3, bucket: str) -> dict | None:
    try:
        return json.loads(s3.get_object(Bucket=bucket, Key=RAY_STATUS_KEY)["Body"].read())
    except s3.exceptions.NoSuchKey:
        return None


def start(
    aws: Aws,
    out: Outputs,
    say=print,
    timeout_s: float = 1800,
    poll_s: float = 10,
    clock=time.time,
    starts: dict[str, int | None] | None = None,
    why=capacity.reasons,
    quota=preflight_calls.read_quota,
    fallback: Fallback | None = None,
) -> dict:
    """Scale the head (and control) to 1 and each group of `starts` (group -> nodes; None: its max) up to that
    many nodes (at most its max; a service already above keeps its count); without `starts`, each group to its
    min. Then wait until Ray sees them all. `why` (aws, out, since) -> [capacity.Reason] says why instances are
    not coming; `fallback` takes the steps a run allows when they do not (rayfleet/ecs/fallback.py). Returns
    the workers Ray sees, the groups waited for (`groups`: another one when the run moved) and the steps taken."""
    ecs = aws.client("ecs")
    aws.check_cluster(out.cluster_name)
    asked = _nodes_asked(out, starts, say)
    shape = preflight.deployment_shape(aws, out, asked)
    if shape is not None:  # a quota or a zone that cannot hold the workers: said now, nothing scaled
        report = preflight.check_capacity(aws, shape, quota=quota)
        if report.problems:
            groups = ", ".join(f"{g.count} x {g.instance_types[0]} ({g.name})" for g in shape.groups)
            raise RayfleetError(f"cannot start {groups}: " + "; ".join(map(str, report.problems)))
    began = clock()
    control = [(out.control_service_name, 1)] if out.control_service_name else []  # autostop may have stopped it
    for service, count in [(out.head_service_name, 1), *control]:
        say(f"scaling {service} to {count} ...")
        ecs.update_service(cluster=out.cluster_name, service=service, desiredCount=count)
    before = {name: _scale_workers(ecs, out, name, nodes, say) for name, nodes in asked.items()}
    wait = _Wait(aws, out, say, clock, began, why, fallback)
    return wait.until_seen(asked, before, timeout_s, poll_s)


class _Wait:
    """Polls the head's snapshot until Ray sees the workers every group's service wants, saying why capacity is
    not coming, stopping at once on a fatal reason, and taking the fallback's steps."""

    def __init__(self, aws: Aws, out: Outputs, say, clock, began: float, why, fallback: Fallback | None):
        self.aws, self.out, self.say, self.clock, self.began = aws, out, say, clock, began
        self.why, self.fallback = why, fallback
        self.ecs, self.s3 = aws.client("ecs"), aws.client("s3")

    def wanted(self, asked: dict[str, int]) -> int:
        """The workers Ray should see: what the asked groups' services want, and the other groups' running tasks
        (Ray counts the whole cluster's workers; another group's capacity that does not come is not this wait's)."""
        found = self.ecs.describe_services(cluster=self.out.cluster_name, services=self.out.worker_service_names)
        mine = {self.out.group(g).service_name for g in asked}
        return sum(s["desiredCount"] if s["serviceName"] in mine else s["runningCount"] for s in found["services"])

    def until_seen(self, asked: dict[str, int], before: dict[str, int], timeout_s: float, poll_s: float) -> dict:
        out, say, clock, began = self.out, self.say, self.clock, self.began
        since, said, shown = datetime.fromtimestamp(began, UTC), began - PROGRESS_EVERY_S, set()
        while True:
            wanted = self.wanted(asked)  # each look: autostop or the queue may change the other groups meanwhile
            snapshot = read_snapshot(self.s3, out.results_bucket)
            fresh = snapshot is not None and _taken(snapshot) >= began
            seen = workers_ray_sees(snapshot) if fresh else 0
            if fresh and seen >= wanted:
                say(f"Ray sees the head and {seen}/{wanted} workers after {clock() - began:.0f} s")
                steps = self.fallback.steps if self.fallback else []
                return {"cluster": out.cluster_name, "workers": seen, "waited_s": round(clock() - began),
                        "groups": asked, "capacity_steps": steps}  # fmt: skip
            reasons = [r for r in self.why(self.aws, out, since) if r.group is None or r.group in asked]
            if fatal := [r for r in reasons if r.fatal]:  # waiting cannot help: say so now, not after the timeout
                raise RayfleetError(
                    f"capacity cannot come: {fatal[0]}; `rayfleet deploy stop` scales the services back to zero"
                )
            if clock() - began > timeout_s:
                last = f" (last reasons: {'; '.join(map(str, reasons))})" if reasons else ""
                raise RayfleetError(
                    f"after {timeout_s:.0f} s Ray sees {seen}/{wanted} workers{last}; see `rayfleet status`"
                )
            moved = self.fallback.consider(reasons, asked, before) if self.fallback else None
            if moved is not None:  # the run goes to another group: raise it, and wait for what the services want
                for name, nodes in moved.items():
                    before.setdefault(name, _scale_workers(self.ecs, out, name, nodes, say))
                asked = moved
            new = [r for r in reasons if r.text not in shown]
            shown.update(r.text for r in new)
            if clock() - said >= PROGRESS_EVERY_S:
                said = clock()
                view = f"Ray sees {seen}/{wanted} workers" if fresh else "no snapshot from the new head yet"
                view += f"; capacity: {'; '.join(map(str, reasons))}" if reasons else ""
                say(f"[{clock() - began:.0f} s] {_tasks(self.ecs, out)}; {view}")
            elif new:  # between progress lines a new reason is said once, when it appears
                say(f"[{clock() - began:.0f} s] capacity: {'; '.join(map(str, new))}")
            time.sleep(poll_s)


def _nodes_asked(out: Outputs, starts: dict[str, int | None] | None, say) -> dict[str, int]:
    """Group -> the nodes to start there: `starts` within each group's max (None: its max); no `starts`: every
    group at its min."""
    if starts is None:
        return {name: g.min_nodes for name, g in out.worker_groups.items()}
    asked = {}
    for name, nodes in starts.items():
        most = out.group(name).max_nodes or 1
        if nodes is not None and nodes < 1:
            raise ConfigError(f"workers must be at least 1 (got {nodes}); `rayfleet deploy stop` scales them to zero")
        if nodes is not None and nodes > most:
            say(f"{nodes} workers asked for; worker group {name} launches at most {most}: starting {most}")
        asked[name] = most if nodes is None else min(nodes, most)
    return asked


def _scale_workers(ecs, out: Outputs, group: str, wanted: int, say) -> int:
    """Scale the group's worker service up to `wanted`, never down: running workers are not taken away by a
    start that asks for fewer. Its count before."""
    service = out.group(group).service_name
    found = ecs.describe_services(cluster=out.cluster_name, services=[service])["services"]
    now = found[0]["desiredCount"] if found else 0
    if now >= wanted:
        if wanted:
            say(f"{service} stays at {now} (asked for {wanted}) ...")
        return now
    say(f"scaling {service} to {wanted} ...")
    ecs.update_service(cluster=out.cluster_name, service=service, desiredCount=wanted)
    return now


def _taken(snapshot: dict) -> float:
    return datetime.fromisoformat(snapshot["taken_at"]).replace(tzinfo=UTC).timestamp()


def _tasks(ecs, out: Outputs) -> str:
    found = ecs.describe_services(cluster=out.cluster_name, services=[out.head_service_name, *out.worker_service_names])
    by_name = {s["serviceName"]: s for s in found["services"]}
    head = by_name.get(out.head_service_name, {})
    said = [f"head {head.get('runningCount', 0)}/{head.get('desiredCount', 0)} running"]
    for name, group in out.worker_groups.items():
        worker = by_name.get(group.service_name, {})
        who = "workers" if len(out.worker_groups) == 1 else f"{name} workers"
        said.append(f"{who} {worker.get('runningCount', 0)}/{worker.get('desiredCount', 0)} running")
    return ", ".join(said)


def start_deployment(
    timeout_s: float = 1800, starts: dict[str, int | None] | None = None, outputs: str | None = None
) -> int:
    """`rayfleet deploy start`: the head back and the groups of `starts` (group -> nodes, None: its max; no
    `starts`: every group at its min), waiting until Ray sees them."""
    out = Outputs.load(outputs)
    start(Aws(out.region), out, timeout_s=timeout_s, starts=starts)
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ecs.start", "rayfleet deploy start")
