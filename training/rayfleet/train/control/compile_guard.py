"""A failure of torch.compile or of a CUDA graph capture is deterministic for a given model, shape, torch
and topology: a retry repeats it.

Ray Train retries every worker failure up to `max_failures`, each retry compiling again first (on an H100,
three retries of the same Inductor assertion cost 259 s). So a worker that fails inside one of these speed
features records which, and why, in the run directory; the job's next attempt reads the record and trains
without that feature, from the last checkpoint. The record names the error, for the user and for us.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

from rayfleet.core.run_dir import RunDir


@dataclass(frozen=True)
class Feature:
    key: str  # the job's config key, set to False for the next attempt
    what: str  # for the one line the next attempt prints
    record: str  # the file in the run directory
    modules: tuple[str, ...]  # exceptions of these modules' types are the feature's
    sources: tuple[str, ...]  # exceptions raised in files whose path has one of these are the feature's
    marks: tuple[str, ...] = ()  # exceptions whose message has one of these are the feature's


COMPILE = Feature(
    "compile",
    "torch.compile",
    "compile_failed.txt",
    ("torch._dynamo", "torch._inductor"),
    # Dynamo and Inductor, and the modules Inductor writes and loads (its cache directory is
    # /tmp/torchinductor_<user>/ unless TORCHINDUCTOR_CACHE_DIR moves it: hence both).
    ("/torch/_dynamo/", "/torch/_inductor/", "/torchinductor_", "/inductor_cache"),
)
CUDA_GRAPH = Feature(
    "cuda_graph",
    "the whole-step CUDA graph",
    "cuda_graph_failed.txt",
    (),
    ("/torch/cuda/graphs.py",),
    ("cudaErrorStreamCapture", "during capture", "stream is capturing"),
)
FEATURES = (COMPILE, CUDA_GRAPH)


def caused_by(feature: Feature, exc: BaseException) -> bool:
    """Whether `exc` (or an exception it was raised from) came out of `feature`: of one of its modules'
    types, raised in one of its files (Inductor's generated `assert_size_stride` checks, for one), or
    carrying one of its messages (CUDA's capture errors surface from whatever call noticed them)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if feature.modules and type(exc).__module__.startswith(feature.modules):
            return True
        frames = traceback.extract_tb(exc.__traceback__)
        if frames and any(source in frames[-1].filename for source in feature.sources):
            return True  # raised there, not merely passed through (every compiled call passes through Dynamo)
        if any(mark in str(exc) for mark in feature.marks):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def record(run_dir: RunDir, exc: BaseException, rank: int, feature: Feature) -> None:
    line = (str(exc).strip().splitlines() or [""])[0][:300]
    try:
        run_dir.write(feature.record, f"{type(exc).__name__} on rank {rank}: {line}\n")
    except Exception as write_error:  # the original error must surface, not this one
        print(f"could not record the {feature.what} failure in {run_dir.url}: {write_error}", flush=True)


def earlier(run_dir: RunDir, feature: Feature) -> str | None:
    """The recorded failure of an earlier attempt of this run, if any."""
    text = run_dir.read(feature.record)
    return text.strip() if text else None


def without_failed(cfg, run_dir: RunDir, rank: int):
    """`cfg` with every feature that failed in an earlier attempt of this run turned off (one line each)."""
    for feature in FEATURES:
        if getattr(cfg, feature.key) is not False and (failed := earlier(run_dir, feature)):
            cfg = cfg.model_copy(update={feature.key: False})
            if rank == 0:
                print(
                    f"{feature.what} failed in an earlier attempt ({failed}); this attempt runs without it", flush=True
                )
    return cfg


def record_failure(cfg, run_dir: RunDir, exc: BaseException, rank: int) -> None:
    """Record `exc` against the feature in use that it came out of, if one did. With
    compile_mode=reduce-overhead the CUDA graphs are compile's own, so a capture error is compile's."""
    compile_graphs = cfg.compile and cfg.compile_mode == "reduce-overhead"
    if cfg.compile and (caused_by(COMPILE, exc) or (compile_graphs and caused_by(CUDA_GRAPH, exc))):
        record(run_dir, exc, rank, COMPILE)
    elif cfg.cuda_graph is not False and not compile_graphs and caused_by(CUDA_GRAPH, exc):
        record(run_dir, exc, rank, CUDA_GRAPH)
