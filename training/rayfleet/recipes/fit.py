"""Does a recipe fit a target: what one worker node there offers (`Capacity`), `check_fits` (refused before
anything is packaged or uploaded, one line per problem) and `nodes_needed` (how many worker nodes a run
takes, so a stopped deployment is started with that many)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rayfleet.core.config import ConfigError
from rayfleet.recipes.schema import Recipe


@dataclass(frozen=True)
class Capacity:
    """What one worker node of the target offers, and how many there are (None: scales on demand)."""

    where: str
    cpus: float
    gpus: int
    memory_gib: float | None
    nodes: int | None


def check_fits(recipe: Recipe, cap: Capacity) -> None:
    found = problems(recipe, cap)
    if found:
        raise ConfigError(f"recipe {recipe.name} does not fit:\n  " + "\n  ".join(found))


def problems(recipe: Recipe, cap: Capacity) -> list[str]:
    """Why the recipe's workers do not fit `cap`, one line each (none: it fits)."""
    res = recipe.resources
    problems = []
    if res.gpus_per_worker > cap.gpus:
        problems.append(
            f"resources.gpus_per_worker: {res.gpus_per_worker} GPUs, but a worker of {cap.where} has {cap.gpus}"
        )
    if res.cpus_per_worker > cap.cpus:
        problems.append(
            f"resources.cpus_per_worker: {res.cpus_per_worker:g} CPUs, but a worker of {cap.where} has {cap.cpus:g}"
        )
    if res.memory_per_worker_gib and cap.memory_gib and res.memory_per_worker_gib > cap.memory_gib:
        problems.append(
            f"resources.memory_per_worker_gib: {res.memory_per_worker_gib:g} GiB, but a worker of "
            f"{cap.where} has {cap.memory_gib:.0f} GiB"
        )
    if not problems and cap.nodes is not None and recipe.launcher and res.workers > cap.nodes:
        problems.append(
            f"resources.workers: launcher {recipe.launcher} runs one node per worker; {res.workers} workers "
            f"need {res.workers} worker nodes, but {cap.where} has {cap.nodes}"
        )
    if not problems and cap.nodes is not None and res.fewest > per_node(recipe, cap) * cap.nodes:
        problems.append(  # elastic: its minimum must fit; it grows as far as the target goes
            f"resources.workers: {res.fewest} workers do not fit {cap.where}: {cap.nodes} node(s) of "
            f"{per_node(recipe, cap)} hold {per_node(recipe, cap) * cap.nodes} of this size"
        )
    return problems


def per_node(recipe: Recipe, cap: Capacity) -> int:
    """How many of the recipe's workers one node of the target holds."""
    res = recipe.resources
    return workers_per_node(res.cpus_per_worker, res.gpus_per_worker, cap)


def workers_per_node(cpus_per_worker: float, gpus_per_worker: int, cap: Capacity) -> int:
    count = int(cap.cpus // cpus_per_worker + 1e-9)
    if gpus_per_worker:
        count = min(count, cap.gpus // gpus_per_worker)
    return count


def nodes_needed(recipe: Recipe, cap: Capacity) -> int:
    """Worker nodes the run takes: one per worker for a launcher recipe, else its workers packed per node (an
    elastic run: as many as its most, within what the target has)."""
    res = recipe.resources
    return nodes_for(res.workers, res.cpus_per_worker, res.gpus_per_worker, recipe.launcher is not None, cap)


def nodes_for(workers: int, cpus_per_worker: float, gpus_per_worker: int, one_per_node: bool, cap: Capacity) -> int:
    """Worker nodes that many workers of that size take (one each when `one_per_node`: a launcher's), within
    what the target has."""
    if one_per_node:
        return workers
    needed = math.ceil(workers / max(workers_per_node(cpus_per_worker, gpus_per_worker, cap), 1))
    return min(needed, cap.nodes) if cap.nodes is not None else needed
