"""What a fork of a node's fork server does to become the fresh process a worker or driver asked for
(rayfleet/node/warm_server.py; the contract: rayfleet/core/warm_workers.py): its standard streams,
environment, working directory and sys.path; torch's and NumPy's generators and torch's thread count; the
server's own package forgotten; then the script or module as __main__.
"""

from __future__ import annotations

import io
import os
import runpy
import sys
import traceback
from pathlib import Path


def become(fds: list[int], argv: list[str], env: dict[str, str], cwd: str, base_path: list[str]) -> int:
    """In the child, once the server's own descriptors are closed: take the request's and run it; its exit
    status. `base_path`: the interpreter's own sys.path entries (the server's, less its first and PYTHONPATH)."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    fresh_stdio(env)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.path[:] = worker_sys_path(argv, env.get("PYTHONPATH", ""), base_path)
    apply_after_fork(env)
    forget_own_modules()
    sys.argv = list(argv)
    return run_main(argv)


def worker_sys_path(argv: list[str], pythonpath: str, base: list[str]) -> list[str]:
    """sys.path as `python SCRIPT ...` or `python -m MODULE ...` would have it with this PYTHONPATH: the
    script's folder (the working directory for -m), then PYTHONPATH, then the interpreter's own (`base`,
    without the server's own first entry and PYTHONPATH)."""
    entries = [p for p in pythonpath.split(os.pathsep) if p]
    first = os.getcwd() if argv[0] == "-m" else str(Path(argv[0]).resolve().parent)
    return [first, *entries, *[p for p in base if p not in entries]]


def runnable(argv: list[str]) -> bool:
    """A script and its arguments, or -m MODULE and its: no other interpreter options."""
    return bool(argv) and (not argv[0].startswith("-") or (argv[0] == "-m" and len(argv) > 1))


def apply_after_fork(env: dict[str, str]) -> None:
    """What a fresh process would have taken from its start: NumPy's and torch's default generators seeded
    from fresh entropy (Python's reseeds itself on fork), and torch's thread count. torch's OpenMP and MKL
    runtimes read OMP_NUM_THREADS once, when loaded: in the server, before the worker's value existed. Ray
    sets it in the worker process itself when the first task arrives (ray/_private/utils.py:
    set_omp_num_threads_if_unset), before it imports what the task needs; so the child gives torch the
    worker's value now if it has one, else the first one the process sets."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()
    torch = sys.modules.get("torch")
    if torch is None:
        return
    torch.default_generator.seed()  # fresh entropy, as torch seeds a fresh process's CPU generator
    if "OMP_NUM_THREADS" in env:
        set_torch_threads(torch, env["OMP_NUM_THREADS"])
        return

    class FirstThreadCount(type(os.environ)):
        def __setitem__(self, key: str, value: str) -> None:
            super().__setitem__(key, value)
            if key == "OMP_NUM_THREADS":
                self.__class__ = FirstThreadCount.__base__  # the first one only, as a runtime's load
                set_torch_threads(torch, value)

    os.environ.__class__ = FirstThreadCount


def set_torch_threads(torch, value: str) -> None:
    if value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def fresh_stdio(env: dict[str, str]) -> None:
    """sys.stdout and sys.stderr as a fresh interpreter makes them for these streams: unbuffered with
    PYTHONUNBUFFERED, else stdout line-buffered on a terminal and block-buffered otherwise, stderr
    line-buffered; the encoding is the server's (the variables that choose it are the same, or it declined)."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        old = getattr(sys, name)
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            encoding=old.encoding,
            errors=old.errors,
            line_buffering=not unbuffered and (name == "stderr" or raw.isatty()),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def forget_own_modules() -> None:
    """The server's own package (rayfleet) is not preloaded: the worker imports it, if at all, from its own
    sys.path (a recipe's packaged code, say), as a fresh process would."""
    own = __name__.split(".")[0]
    for name in [m for m in sys.modules if m == own or m.startswith(own + ".")]:
        del sys.modules[name]


def run_main(argv: list[str]) -> int:
    """Run the script or module as __main__ (sys.argv already set); its exit status."""
    try:
        if argv[0] == "-m":
            sys.argv = argv[1:]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as done:
        if done.code is None:
            return 0
        if isinstance(done.code, int):
            return done.code
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0
