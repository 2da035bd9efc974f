"""A queued run that moves to another worker group when its own group's nodes do not come free: the `group` step of
a recipe's `capacity_fallback` on a local cluster, where a group's capacity is its fixed nodes (no Auto Scaling
group to change; on ECS the operator's bring-up takes the steps: rayfleet/ecs/fallback.py).

The submitter (rayfleet/targets/local.py) lists the other groups that hold the run whole, cheapest first
(rayfleet/recipes/group_choice.py `alternatives`), and passes them with the queue's spec; the run's job
(rayfleet/recipes/admission.py `wait_turn`) takes the step once the run has waited `after_s` in its group's
line: one line in the run's log, the entry's group changed (so the admission probe and the queue's per-group
lines follow), and an event for the run's record (`group`, `capacity_steps` with the minutes waited). The job
then starts its command with RAYFLEET_WORKER_GROUP set to the new group, which is where its drivers place the
workers (core/worker_groups.py). Nothing here needs a right the job does not already have: it only asks Ray
for another group's nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rayfleet.core import worker_groups
from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.core.run_queue import Entry

BY = "the run's job on the local cluster, while it waited in the queue"
MAX_AFTER_S = 24 * 3600.0
MAX_GROUPS = 64  # a deployment's groups are far fewer: the bound on what a Jobs API value may carry


@dataclass
class GroupMove:
    groups: list[str]  # the other groups that hold the run whole, in the order to try them
    after_s: float  # how long the run waits in a group's line before it moves on
    steps: list[dict] = field(default_factory=list)  # what was done, for the run's record
    since: float | None = None  # when the run began waiting in its current group's line

    def spec(self) -> dict:
        return {"groups": list(self.groups), "after_s": self.after_s}

    @classmethod
    def from_spec(cls, value) -> GroupMove | None:
        """The move job_entry's --queue value carries (None: the run stays on its group); checked, since the
        value came through the Jobs API."""
        if value is None:
            return None
        try:
            listed = value["groups"]
            if not isinstance(listed, list) or len(listed) > MAX_GROUPS:
                raise ValueError(f"groups: a list of at most {MAX_GROUPS} names")
            groups = [worker_groups.check_name(g) for g in listed]
            after_s = float(value["after_s"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"the queue's group move: {exc}") from None
        if not 0 <= after_s <= MAX_AFTER_S:
            raise ConfigError(f"the queue's group move: after_s {after_s} is not within 0..{MAX_AFTER_S:g}")
        return cls(groups, after_s)

    def pause(self) -> None:
        """The run stopped waiting for nodes (held by the budget): its next wait for them starts anew."""
        self.since = None

    def step(self, entry: Entry, reason: str, now: float, run_dir: RunDir, say: Callable[[str], None]) -> bool:
        """One look while the run waits in its group's line (`reason`: why it waits): moves it to the next group
        once it has waited `after_s`. Whether it moved."""
        if self.since is None:
            self.since = now
        left = [g for g in self.groups if g != entry.group and g not in {s["group"] for s in self.steps}]
        if now - self.since < self.after_s or not left:
            return False
        waited = round((now - self.since) / 60, 1)
        step = {"step": "group", "group": entry.group, "to": left[0], "waited_min": waited, "reason": reason, "by": BY}
        self.steps.append(step)
        say(f"capacity: worker group {entry.group}: {reason} for {waited:g} min: the run moves to group {left[0]}")
        entry.group, self.since = left[0], now
        run_dir.send("capacity", group=entry.group, capacity_steps=list(self.steps))
        return True
