"""A torch.compile failure is deterministic for a given model, shape and torch: a retry repeats it.

Ray Train retries every worker failure up to `max_failures`, each retry compiling again first (on an H100,
three retries of the same Inductor assertion cost 259 s). So a worker that fails inside Dynamo, Inductor or
the code Inductor generated records it in the run directory; the job's next attempt reads the record and
trains without compile, from the last checkpoint. The record names the error, for the user and for us.
"""

from __future__ import annotations

import traceback

from rayfleet.core.run_dir import RunDir

RECORD = "compile_failed.txt"
# Where compile errors come from: Dynamo and Inductor themselves, and the modules Inductor writes and loads
# (its cache directory is /tmp/torchinductor_<user>/ unless TORCHINDUCTOR_CACHE_DIR moves it: hence both).
_SOURCES = ("/torch/_dynamo/", "/torch/_inductor/", "/torchinductor_", "/inductor_cache")
_MODULES = ("torch._dynamo", "torch._inductor")


def is_compile_error(exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from) came out of torch.compile's machinery: raised by
    Dynamo or Inductor, or by code Inductor generated (its `assert_size_stride` checks, for one)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__module__.startswith(_MODULES):
            return True
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and any(source in frames[-1].filename for source in _SOURCES):
            return True  # raised there, not merely passed through (every compiled call passes through Dynamo)
        exc = exc.__cause__ or exc.__context__
    return False


def record(run_dir: RunDir, exc: BaseException, rank: int) -> None:
    line = (str(exc).strip().splitlines() or [""])[0][:300]
    try:
        run_dir.write(RECORD, f"{type(exc).__name__} on rank {rank}: {line}\n")
    except Exception as write_error:  # the original error must surface, not this one
        print(f"could not record the compile failure in {run_dir.url}: {write_error}", flush=True)


def earlier(run_dir: RunDir) -> str | None:
    """The recorded failure of an earlier attempt of this run, if any."""
    text = run_dir.read(RECORD)
    return text.strip() if text else None
