"""The local target: the recipe's run on the local Ray cluster (the running one, or one started for it),
submitted through Ray's Jobs API and followed here."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from rayfleet.core import ledger
from rayfleet.core.run_dir import RunDir, runs_root
from rayfleet.local import cluster as local_cluster
from rayfleet.local import gcs_store
from rayfleet.recipes import cost
from rayfleet.recipes import secrets as recipe_secrets
from rayfleet.recipes.fit import Capacity, check_fits
from rayfleet.recipes.group_choice import Choice, Group, alternatives, choose, on_group
from rayfleet.recipes.group_move import GroupMove
from rayfleet.recipes.job import run_job
from rayfleet.recipes.schema import LoadedRecipe
from rayfleet.targets import detach as detached
from rayfleet.targets import estimate
from rayfleet.targets.base import package_into


def machine_gpus() -> int:
    return sum(1 for p in Path("/dev").glob("nvidia[0-9]*"))


def local_groups(spec: local_cluster.ClusterSpec) -> list[Group]:
    """The running cluster's worker groups as a run chooses among them: free, so the smallest node that fits."""
    where = "the running local cluster (rayfleet cluster up)"
    cpus = spec.cpus_per_worker
    return [
        Group(
            name,
            Capacity(f"{where}, group {name}", cpus, gpus, None, nodes),
            shown=f"{cpus:g} CPU" + (f" + {gpus} GPU" if gpus else ""),
        )
        for name, nodes, gpus in spec.listed_groups()
    ]


def local_choice(loaded: LoadedRecipe, state: local_cluster.ClusterState | None) -> Choice | None:
    """The group of the running cluster the run goes to (None: no cluster runs; one is started for the run,
    sized to it)."""
    if state is None:
        return None
    where = "the running local cluster"
    return choose(loaded.recipe, local_groups(local_cluster.ClusterSpec(**state.spec)), where)


def group_move(loaded: LoadedRecipe, state, choice: Choice | None) -> GroupMove | None:
    """The other groups of the running cluster a run may move to while it waits in its group's line, when its
    recipe allows it (`capacity_fallback: [..., group]`): rayfleet/recipes/group_move.py."""
    recipe = loaded.recipe
    if choice is None or not choice.group.name or "group" not in recipe.capacity_fallback:
        return None
    groups = local_groups(local_cluster.ClusterSpec(**state.spec))
    others = [name for name, _ in alternatives(recipe, groups, choice.group.name)]
    return GroupMove(others, recipe.capacity_fallback_after_min * 60) if others else None


def local_estimate(loaded: LoadedRecipe, state, choice: Choice | None, storage: str) -> dict:
    """What the run would take here (rayfleet/targets/estimate.py): this machine costs nothing."""
    group = choice.group.name if choice else loaded.recipe.resources.group
    now = time.time()
    ahead = estimate.queue_ahead(str(local_cluster.state_dir()), group, now) if state else {"ahead": 0, "start_by": now}
    return estimate.build(group, 0.0, estimate.past_durations(storage, loaded.recipe.name, group), ahead, now)


def local_storage(loaded: LoadedRecipe, launch_dir: Path) -> str:
    storage = loaded.recipe.storage or runs_root(launch_dir=launch_dir)
    return storage if storage.startswith("s3://") else str((launch_dir / storage).resolve())


def machine_capacity(loaded: LoadedRecipe) -> Capacity:
    """What a cluster started for this run offers: sized to the recipe, on this machine's GPUs and memory."""
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return Capacity("this machine", loaded.recipe.resources.cpus_per_worker, machine_gpus(), memory_gib, None)


def run_local(
    loaded: LoadedRecipe, extra_args: list[str], run_name: str, launch_dir: Path, detach: bool = False
) -> int:
    submitted = time.time()  # the run's ledger starts here (rayfleet/recipes/run_ledger.py)
    state = local_cluster.running()
    choice = local_choice(loaded, state)
    if choice is None:
        check_fits(loaded.recipe, machine_capacity(loaded))
    else:  # the run goes to that group's nodes only: the queue, its job and its placement groups
        print(f"[rayfleet] {choice.line}", flush=True)
        loaded = on_group(loaded, choice.group.name)
    move = group_move(loaded, state, choice)
    recipe = loaded.recipe
    storage = local_storage(loaded, launch_dir)
    expected = local_estimate(loaded, state, choice, storage)
    if recipe.image:
        print(f"[rayfleet] image {recipe.image} applies on ECS only; local runs use this environment", flush=True)
    run_dir = RunDir(storage, run_name)
    with (
        recipe_secrets.handoff(recipe.secret_refs()) as secret_refs,
        tempfile.TemporaryDirectory(prefix="rayfleet-code-") as tmp,
    ):
        code = package_into(loaded, run_dir, Path(tmp), "local", extra_args, cost.held_local())
        run_dir.update(estimate=expected, **{ledger.SUBMITTED: submitted})  # set against the run's ledger
        started = False
        if state is None:
            print(
                f"[rayfleet] no local Ray cluster running: starting one for this run ({recipe.resources.workers} "
                "workers; stopped when it ends)",
                flush=True,
            )
            res = recipe.resources
            spec = local_cluster.ClusterSpec.from_env(
                workers=res.workers,
                cpus_per_worker=res.cpus_per_worker,
                gpus_per_worker=res.gpus_per_worker,
                groups=[[res.group, res.workers, res.gpus_per_worker]] if res.group else None,
            )
            waited = time.monotonic()
            state = local_cluster.up(spec)
            started = True
            run_dir.update(**{ledger.NODE_WAIT: round(time.monotonic() - waited, 3)})  # the ledger's node start
        if detach:  # from here on a background process follows the run; this one exits once it is submitted
            detached.background(run_dir, detached.log_path(run_dir, launch_dir))
        try:
            return run_job(
                recipe,
                run_dir,
                address=state.dashboard_url,
                working_dir=str(code["path"]),
                extra_args=extra_args,
                launch_dir=str(launch_dir),
                secret_refs=secret_refs,
                data=str(loaded.data_path) if loaded.data_path else None,  # the workers share this machine
                # the driver on a worker node when the head may be replaced (its GCS on a store)
                entrypoint_resources=gcs_store.driver_resources() if state.store else None,
                # a shared cluster queues its runs (rayfleet/core/run_queue.py); one started for this run not
                queue_root=None if started else str(local_cluster.state_dir()),
                move=move,
            )
        finally:
            if started:
                local_cluster.down(quiet=True)


class LocalTarget:
    name = "local"

    def __init__(self, launch_dir: Path | None = None):
        self.launch_dir = launch_dir or Path.cwd()

    def submit(self, loaded: LoadedRecipe, extra_args: list[str], run_name: str, detach: bool) -> int:
        return run_local(loaded, extra_args, run_name, self.launch_dir, detach)

    def estimate(self, loaded: LoadedRecipe) -> dict:
        state = local_cluster.running()
        choice = local_choice(loaded, state)
        if choice is None:
            check_fits(loaded.recipe, machine_capacity(loaded))
        return local_estimate(loaded, state, choice, local_storage(loaded, self.launch_dir))
