"""What a recipe runs, once loaded: its command line (the entrypoint, args and a launcher's own command) and
the environment rayfleet gives it (the job variables, the recipe's plain values; secrets resolve elsewhere)."""

from __future__ import annotations

import shlex
import string
from pathlib import Path

from rayfleet.core import warm_workers, worker_groups
from rayfleet.core.config import ConfigError
from rayfleet.recipes.schema import Recipe, entry_kind


def job_env(recipe: Recipe, run_name: str, storage: str, launch_dir: str, data: str | None = None) -> dict[str, str]:
    res = recipe.resources
    values = {
        "RAYFLEET_RUN_NAME": run_name,
        "RAYFLEET_STORAGE": storage,
        "RAYFLEET_RUN_DIR": f"{storage.rstrip('/')}/{run_name}",
        "RAYFLEET_LAUNCH_DIR": launch_dir,
        "RAYFLEET_NUM_WORKERS": str(res.workers),
        "RAYFLEET_MIN_WORKERS": str(res.fewest),  # the same as RAYFLEET_NUM_WORKERS unless elastic
        "RAYFLEET_CPUS_PER_WORKER": f"{res.cpus_per_worker:g}",
        "RAYFLEET_GPUS_PER_WORKER": str(res.gpus_per_worker),
    }
    if res.memory_per_worker_gib is not None:
        values["RAYFLEET_MEMORY_PER_WORKER_GIB"] = f"{res.memory_per_worker_gib:g}"
    if data:  # the recipe's data: a local path, or its staged s3:// copy
        values["RAYFLEET_DATA"] = data
    if res.group:  # its workers go to that group's nodes only (Ray's label selector: core/worker_groups.py)
        values[worker_groups.GROUP_VAR] = res.group
    return values


def expand(text: str, variables: dict[str, str], where: str) -> str:
    """${RAYFLEET_...} -> its value; any other ${...} is an error (a typo would silently stay in)."""
    try:
        return string.Template(text).substitute(variables)
    except (KeyError, ValueError) as exc:
        known = ", ".join(f"${{{k}}}" for k in variables)
        raise ConfigError(f"{where}: {text!r} uses an unknown variable {exc}; known: {known}") from None


def command(recipe: Recipe, python: str, variables: dict[str, str], extra_args: list[str]) -> str:
    """The shell command the Ray job runs in the unpacked code directory."""
    args = [expand(a, variables, "args") for a in [*recipe.args, *extra_args]]
    words = shlex.split(recipe.entrypoint)
    kind = entry_kind(recipe.entrypoint)
    if recipe.pip:  # Ray's per-job virtualenv (over the cluster's packages) is first on PATH: use its python
        python, prefix = "python", ""
    else:  # the cluster's interpreter, and its bin first: torchrun, accelerate, deepspeed of the same environment
        prefix = f'export PATH={shlex.quote(str(Path(python).parent))}:"$PATH"; '
    if recipe.launcher:  # the driver places one launcher per worker node (rayfleet/node/driver/multinode.py)
        head = [python, "-m", "rayfleet.node.driver.multinode", "--launcher", recipe.launcher]
        head += ["--max-restarts", str(recipe.max_restarts)]
        head += [f"--launcher-arg={option}" for option in recipe.launcher_args]
        head += ["--", *words]
    elif kind in ("module", "script"):  # forked from the node's warm server, as its workers (core/warm_workers.py)
        head = [python, *([] if recipe.pip else warm_workers.LAUNCHER), *words]
    else:
        head = words
    main = shlex.join([*head, *args])
    setup = f"{recipe.setup} && " if recipe.setup else ""
    return f"{prefix}{setup}{main}"


def plain_env(recipe: Recipe, variables: dict[str, str]) -> dict[str, str]:
    return {k: expand(v, variables, f"env.{k}") for k, v in recipe.env.items() if isinstance(v, str)}
