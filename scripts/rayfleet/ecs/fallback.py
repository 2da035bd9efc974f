"""When a worker group's capacity does not come: the steps a run's recipe allows (`capacity_fallback`), in order,
each once a capacity reason for the group (rayfleet/ecs/capacity.py: no Spot capacity, insufficient capacity in
a zone) has lasted `after_s` without its nodes coming.

    types      the group's other instance types: its Auto Scaling group (mixed instances) tries them by itself;
               the step says so, and gives them time
    on-demand  a spot-preferred group launches on-demand: UpdateAutoScalingGroup with the group's mixed instances
               policy at OnDemandPercentageAboveBaseCapacity 100. `rayfleet deploy stop` puts Spot back, as does
               the next `rayfleet deploy` (Terraform's configuration)
    group      (opt-in) the run moves to the next group that fits it: the first group's service back to what it
               ran before, the other's raised

A fatal reason (a quota of 0, a type not offered) still fails the wait at once. Who takes the steps: the process
that waits for the run's nodes, `rayfleet run`'s bring-up on the operator's machine (followed and detached runs
alike: the submitter returns only once the nodes came), with the operator's credentials (infra/operator-policy.json
holds autoscaling:DescribeAutoScalingGroups and UpdateAutoScalingGroup). The control task's own raises (the queue,
rayfleet/node/control/queue_scaling.py) take none. On a local cluster the `group` step is the job's own, inside its
queue wait (rayfleet/recipes/group_move.py). Each step is one line and an entry of the run's record
(`capacity_steps`: step, group, minutes waited, by whom).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rayfleet.core.aws import Aws
from rayfleet.ecs.capacity import Reason
from rayfleet.ecs.outputs import Outputs

STEPS = ("types", "on-demand", "group")
DEFAULT_STEPS = ("types", "on-demand")
AFTER_S = 300.0  # how long a group's capacity reason lasts before the next step
BY = "rayfleet run on the operator's machine (the operator's credentials)"


@dataclass
class Fallback:
    aws: Aws
    out: Outputs
    allowed: tuple[str, ...] = DEFAULT_STEPS
    alternatives: tuple[tuple[str, int], ...] = ()  # (group, nodes) that also fit the run, cheapest first
    after_s: float = AFTER_S
    say: Callable[[str], None] = print
    clock: Callable[[], float] = time.time
    steps: list[dict] = field(default_factory=list)  # what was done, for the run's record
    _since: dict[str, float] = field(default_factory=dict)  # group -> when its reason began (or its last step)
    _taken: dict[str, list[str]] = field(default_factory=dict)

    def consider(self, reasons: list[Reason], asked: dict[str, int], before: dict[str, int]) -> dict[str, int] | None:
        """One look at the wait's reasons: the next step for each asked group whose capacity reason has lasted
        `after_s`. Returns the groups to wait for when the run moved to another group, else None."""
        now = self.clock()
        short = {r.group: r for r in reasons if r.group in asked and not r.fatal}
        for group in [g for g in self._since if g not in short]:
            del self._since[group]  # its capacity came, or its reason went: a new spell waits again
        for group, reason in short.items():
            began = self._since.setdefault(group, now)
            if now - began < self.after_s:
                continue
            step = next((s for s in self.allowed if s not in self._taken.get(group, []) and self._fits(s, group)), None)
            if step is None:
                continue
            self._taken.setdefault(group, []).append(step)
            self._since[group] = now
            moved = self._take(step, group, reason, round((now - began) / 60, 1), asked, before)
            if moved is not None:
                return moved
        return None

    def _fits(self, step: str, group: str) -> bool:
        found = self.out.group(group)
        if step == "types":
            return len(found.types) > 1
        if step == "on-demand":
            return found.spot == "spot-preferred" and bool(found.autoscaling_group)
        return any(g != group for g, _ in self.alternatives)

    def _take(self, step: str, group: str, reason: Reason, waited: float, asked: dict, before: dict) -> dict | None:
        found = self.out.group(group)
        entry = {"step": step, "group": group, "waited_min": waited, "reason": reason.text, "by": BY}
        moved = None
        if step == "types":
            line = f"its Auto Scaling group tries its other types itself ({', '.join(found.types[1:])})"
        elif step == "on-demand":
            on_demand(self.aws, found.autoscaling_group)
            line = f"on-demand instead of Spot in the group ({found.autoscaling_group})"
        else:
            other, nodes = next((g, n) for g, n in self.alternatives if g != group)
            back = self._without_this_run(found.service_name, asked[group], before[group])
            moved = {other: nodes, **{g: n for g, n in asked.items() if g != group}}
            entry["to"] = other
            line = f"the run moves to worker group {other} ({nodes} node(s)); {group} back to {back}"
        self.steps.append(entry)
        self.say(f"[rayfleet] capacity: worker group {group}: {reason.text} for {waited:g} min: {line}")
        return moved

    def _without_this_run(self, service: str, asked: int, before: int) -> int:
        """The group's service lowered by what this run raised it (from `before` to `asked`), no more: a raise
        made meanwhile by the queue or another run stays. The count it was set to."""
        ecs = self.aws.client("ecs")
        found = ecs.describe_services(cluster=self.out.cluster_name, services=[service])["services"]
        now = found[0]["desiredCount"] if found else before
        back = max(before, now - max(0, asked - before))
        if back != now:
            ecs.update_service(cluster=self.out.cluster_name, service=service, desiredCount=back)
        return back


def on_demand(aws: Aws, asg: str) -> None:
    """The Auto Scaling group's mixed instances policy, with every instance above its base on-demand."""
    autoscaling = aws.client("autoscaling")
    (found,) = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[asg])["AutoScalingGroups"]
    _distributed(autoscaling, asg, found["MixedInstancesPolicy"], 100)


def _distributed(autoscaling, asg: str, policy: dict, on_demand_percent: int) -> None:
    """UpdateAutoScalingGroup with `policy` as DescribeAutoScalingGroups gave it, its on-demand share above the base
    set. Describe names the launch template by id and by name; an update takes one of them."""
    template = dict(policy.get("LaunchTemplate") or {})
    spec = dict(template.get("LaunchTemplateSpecification") or {})
    if spec.get("LaunchTemplateId"):
        spec.pop("LaunchTemplateName", None)
    distribution = {**policy.get("InstancesDistribution", {}), "OnDemandPercentageAboveBaseCapacity": on_demand_percent}
    policy = {**policy, "LaunchTemplate": {**template, "LaunchTemplateSpecification": spec}}
    autoscaling.update_auto_scaling_group(
        AutoScalingGroupName=asg, MixedInstancesPolicy={**policy, "InstancesDistribution": distribution}
    )


def back_to_spot(aws: Aws, out: Outputs, say: Callable[[str], None] = print, only: str | None = None) -> list[str]:
    """Every spot-preferred group's (or `only` that group's) Auto Scaling group back to Spot above its base
    (`rayfleet deploy stop`): what the on-demand step changed. The groups it changed back."""
    autoscaling, changed = aws.client("autoscaling"), []
    for name, group in out.worker_groups.items():
        if group.spot != "spot-preferred" or not group.autoscaling_group or only not in (None, name):
            continue
        found = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[group.autoscaling_group])
        for asg in found["AutoScalingGroups"]:
            policy = asg.get("MixedInstancesPolicy") or {}
            if (policy.get("InstancesDistribution") or {}).get("OnDemandPercentageAboveBaseCapacity", 0) == 0:
                continue
            _distributed(autoscaling, asg["AutoScalingGroupName"], policy, 0)
            say(f"worker group {name}: back to Spot above its on-demand base")
            changed.append(name)
    return changed
