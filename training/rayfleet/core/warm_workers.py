"""Warm worker processes: the contract between a node's fork server (rayfleet/node/warm_server.py), the
launcher Ray runs for every worker process of a rayfleet job (rayfleet/node/warm_client.py), and the
drivers that ask for it (rayfleet/train/ray_connect.py, rayfleet/recipes/job.py).

A Ray Train run starts about eight Python processes (its controller, its workers, their helpers), and each
imports torch and Ray Train's other dependencies again: about 5 s of CPU apiece. A node started by rayfleet
keeps one fork server that imported those once, when the node started, and never runs anything else; a job
whose runtime_env names PY_EXECUTABLE gets each worker process as a fresh fork of it, with the environment,
working directory and standard streams Ray gave that worker, which then imports Ray itself. Ray is never
preloaded: importing it fixes its configuration from the environment (the worker's job id among it). Where
a fork could differ from a fresh process (an environment variable that a preloaded module may have read at
import differs), or where the node has no fork server, the launcher starts a fresh process, as Ray would.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

# The node's fork server listens here (a Unix socket in the node's private directory); set in the node's
# environment, so Ray's workers on that node inherit it.
SOCKET_ENV = "RAYFLEET_WARM_SOCKET"
# Comma-separated modules the fork server imports at start (the node's choice). The default: torch and
# torchvision, and what importing Ray Train and rayfleet's jobs brings of the rest (measured: a fresh
# `import ray.train.torch, rayfleet.train.ddp` 5.9 s on the CI machine, 0.9 s after these). Never Ray.
PRELOAD_ENV = "RAYFLEET_WARM_PRELOAD"
DEFAULT_PRELOAD = (
    "torch",
    "torchvision",
    "numpy",
    "pandas",
    "pyarrow",
    "pyarrow.fs",
    "pydantic",
    "fsspec",
    "google.protobuf",
    "jsonschema",
    "requests",
    "yaml",
    "psutil",
    "msgpack",
    "cloudpickle",
    "click",
    "filelock",
    "packaging",
    "tqdm",
    "uvloop",
    "colorful",
)
NEVER_PRELOADED = "ray"

# Ray execs this in place of the worker's `python` (runtime_env py_executable, a shell word list): on a node
# without a fork server it is `python` itself, the nodes' environment's first on PATH. A recipe job's driver
# starts the same way: the cluster's python, then LAUNCHER, then its module or script (recipes/command.py).
LAUNCHER = ("-m", "rayfleet.node.warm_client")
PY_EXECUTABLE = " ".join(("python", *LAUNCHER))

# Environment variables that a preloaded module may read once, at import or at load (the C runtimes read
# theirs when loaded): a worker that asks for another value than the fork server's gets a fresh process.
IMPORT_TIME_PREFIXES = (
    "TORCH",
    "PYTORCH",
    "CUDA",
    "NCCL",
    "GLOO",
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL",
    "OPENBLAS",
    "NUMPY",
    "PANDAS",
    "ARROW",
    "FSSPEC",
    "JEMALLOC",
    "MALLOC",
    "LD_",
    "PYTHON",
    "TRITON",
    "LC_",
    "LANG",
    "TZ",
    "HOME",
)
# Those a fork still gets right: Python reads PYTHONBREAKPOINT at each breakpoint(); the fork rebuilds
# sys.path from PYTHONPATH and its standard streams by PYTHONUNBUFFERED, and gives torch Ray's per-worker
# OMP_NUM_THREADS (rayfleet/node/warm_fork.py).
AFTER_FORK = frozenset({"PYTHONBREAKPOINT", "PYTHONPATH", "PYTHONUNBUFFERED", "OMP_NUM_THREADS"})


def launched(command: list[str]) -> list[str]:
    """`command` through the launcher when it is `<python> -m MODULE ...` or `<python> SCRIPT ...` (a driver a
    node's fork server can fork), else unchanged."""
    python, rest = (command[0], command[1:]) if command else ("", [])
    runs_python = Path(python).name.startswith("python") and bool(rest)
    if runs_python and (rest[0] == "-m" or not rest[0].startswith("-")):
        return [python, *LAUNCHER, *rest]
    return command


def runtime_env() -> dict[str, str]:
    """The runtime_env fields that put a job's worker processes on the nodes' fork servers."""
    return {"py_executable": PY_EXECUTABLE}


def import_time_differences(preloaded_env: Mapping[str, str], wanted_env: Mapping[str, str]) -> list[str]:
    """The variables a worker asks for that differ from the fork server's environment once it preloaded (what
    the modules read, and what importing them set) and that the modules may have read at import; empty when
    a fork is the same as a fresh process."""
    keys = set(preloaded_env) | set(wanted_env)
    # A thread count the server has and the worker lacks cannot be applied: the fresh default is the CPUs'.
    applied = AFTER_FORK if "OMP_NUM_THREADS" in wanted_env else AFTER_FORK - {"OMP_NUM_THREADS"}
    return sorted(
        key
        for key in keys
        if key.startswith(IMPORT_TIME_PREFIXES) and key not in applied and preloaded_env.get(key) != wanted_env.get(key)
    )
