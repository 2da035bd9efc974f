"""Which worker group a run goes to: the one its recipe names (`resources.group`), else the cheapest group that
fits its shape (`resources`: workers, CPUs, GPUs, memory and `accelerator`), priced per hour for the nodes the
run needs (the Spot price where the group runs Spot; nothing on the local cluster, where the smallest node that
fits wins). A run no group can hold is refused before anything is packaged or uploaded, in one line naming
each group and why it does not fit. The choice becomes the run's `resources.group`, so the queue, the job's
Ray Train workers and the launchers' placement groups all go to that group's nodes only
(rayfleet/core/worker_groups.py), and the job decides GPU use from that group's nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rayfleet.core.config import ConfigError
from rayfleet.recipes.fit import Capacity, nodes_needed, problems
from rayfleet.recipes.schema import LoadedRecipe, Recipe


@dataclass(frozen=True)
class Group:
    """One worker group of a target: one node's shape with the group's most nodes, and its price."""

    name: str
    capacity: Capacity
    usd_per_node_hour: float = 0.0
    accelerator: str | None = None  # None: GPUs that stand in for any (the local cluster's logical GPUs)
    shown: str = ""  # how messages name one node: "g5.xlarge", "1 CPU + 4 GPU"
    spot: bool = False  # usd_per_node_hour is the Spot price of the last hour

    @property
    def described(self) -> str:
        return f"{self.capacity.nodes if self.capacity.nodes is not None else 'any'} node(s) x {self.shown}"


@dataclass(frozen=True)
class Choice:
    group: Group
    nodes: int  # the worker nodes the run needs there
    usd_per_hour: float
    line: str  # the run's first line says it


def why_not(recipe: Recipe, group: Group) -> list[str]:
    """Why `group` cannot hold the run (none: it can)."""
    res = recipe.resources
    found = []
    if res.accelerator and group.accelerator is not None and res.accelerator != group.accelerator:
        found.append(f"its GPUs are {group.accelerator or 'none'}, not {res.accelerator}")
    return found + problems(recipe, group.capacity)


def choose(recipe: Recipe, groups: list[Group], where: str) -> Choice:
    """The group the run goes to (ConfigError, one line: the named group lacks, or none fits)."""
    named = recipe.resources.group
    candidates = [g for g in groups if named in (None, g.name)]
    if named and not candidates:
        listed = "; ".join(f"{g.name}: {g.described}" for g in groups) or "none"
        raise ConfigError(f"resources.group: {where} has no worker group {named!r}; its groups: {listed}")
    fitting, refused = [], []
    for group in candidates:
        reasons = why_not(recipe, group)
        if reasons:
            refused.append(f"{group.name} ({group.described}): {', '.join(reasons)}")
        else:
            fitting.append(group)
    # an elastic run goes to a group that holds its most workers: one that holds only its fewest would stop it
    # growing; with none, it goes across the groups (below) and grows wherever Ray finds room
    most = recipe.model_copy(update={"resources": recipe.resources.model_copy(update={"min_workers": None})})
    whole = [g for g in fitting if not why_not(most, g)]
    if not whole and not named and len(groups) > 1 and not why_not(recipe, across := spanning(groups, where)):
        nodes = nodes_needed(recipe, across.capacity)
        line = f"no one worker group holds its {nodes} node(s): its workers go to any node of {across.shown}"
        return Choice(across, nodes, nodes * across.usd_per_node_hour, line)
    fitting = whole or fitting
    if not fitting:
        raise ConfigError(f"recipe {recipe.name} fits no worker group of {where}: " + "; ".join(refused))

    def price(group: Group) -> tuple:
        nodes = nodes_needed(recipe, group.capacity)
        cap = group.capacity
        return (nodes * group.usd_per_node_hour, cap.gpus, cap.cpus, cap.memory_gib or 0.0, group.name)

    best = min(fitting, key=price)
    nodes, usd = nodes_needed(recipe, best.capacity), price(best)[0]
    if named:
        why = "named by the recipe"
    elif len(fitting) == 1:
        why = "the only one that fits" if len(candidates) > 1 else "the only one"
    else:
        why = f"the {'cheapest' if usd else 'smallest'} of {len(fitting)} that fit"
    cost = f", ${usd:,.2f}/h" if usd else ""
    line = f"worker group {best.name}: {nodes} node(s) x {best.shown}{cost} ({why})"
    return Choice(best, nodes, usd, line)


def alternatives(recipe: Recipe, groups: list[Group], chosen: str) -> list[tuple[str, int]]:
    """The other groups that hold the run whole, cheapest first, with the nodes it needs there: where its
    capacity may fall back to (`capacity_fallback: [..., group]`, rayfleet/ecs/fallback.py)."""
    fitting = [g for g in groups if g.name != chosen and not why_not(recipe, g)]
    priced = sorted((nodes_needed(recipe, g.capacity) * g.usd_per_node_hour, g.name, g) for g in fitting)
    return [(g.name, nodes_needed(recipe, g.capacity)) for _, _, g in priced]


def spanning(groups: list[Group], where: str) -> Group:
    """Every group as one, for a run that names none and that no one group holds: the smallest node of them,
    all their nodes, the dearest price; its name is "" (the run goes wherever Ray finds room, as with no groups)."""
    caps = [g.capacity for g in groups]
    memory = [c.memory_gib for c in caps]
    nodes = [c.nodes for c in caps]
    capacity = Capacity(
        f"{where}, all its groups",
        min(c.cpus for c in caps),
        min(c.gpus for c in caps),
        None if None in memory else min(memory),
        None if None in nodes else sum(nodes),
    )
    accelerators = {g.accelerator for g in groups}
    accelerator = accelerators.pop() if len(accelerators) == 1 else "mixed"
    price = max(g.usd_per_node_hour for g in groups)
    return Group("", capacity, price, accelerator, ", ".join(f"{g.name} ({g.described})" for g in groups))


def on_group(loaded: LoadedRecipe, group: str) -> LoadedRecipe:
    """The recipe with its run's group set: what is packaged, recorded and queued from here on ("" for none: the
    run goes wherever its resources fit)."""
    resources = loaded.recipe.resources.model_copy(update={"group": group or None})
    return replace(loaded, recipe=loaded.recipe.model_copy(update={"resources": resources}))
