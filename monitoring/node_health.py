"""Whether this node's GPUs can still be trusted, from the samples the sidecar takes anyway.

A GPU that reports an uncorrectable ECC error (volatile count above zero: its memory returned bad data) or
that fell off the bus (NVML answers "GPU is lost") makes the node suspect. The sidecar then writes
`suspect.json` into its health directory (RAYFLEET_HEALTH_DIR, a task volume the Ray worker reads), once:

    {"reasons": ["GPU 3 (NVIDIA H100 80GB HBM3): 2 uncorrectable ECC error(s)"], "since": "<ISO time>"}

The format is the contract with the worker's entry point (rayfleet/node/control/suspect.py), which drains the node
and has its instance replaced; there is no import between the two.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from monitoring.nvml_sampler import GpuSample

FILE = "suspect.json"


def reasons(samples: list[GpuSample]) -> list[str]:
    """What is wrong with these samples' GPUs, one line each; [] when nothing is."""
    found = []
    for gpu in samples:
        if gpu.lost:
            found.append(f"GPU {gpu.index} fell off the bus (NVML: GPU is lost)")
            continue
        errors = int(gpu.values.get("GPUECCErrorsUncorrected", 0))
        if errors > 0:
            found.append(f"GPU {gpu.index} ({gpu.name}): {errors} uncorrectable ECC error(s)")
    return found


def mark_suspect(health_dir: str | Path, found: list[str], now: datetime | None = None) -> Path | None:
    """Write the suspect file whole (by rename), unless one is there already; its path when written."""
    path = Path(health_dir) / FILE
    if path.exists():
        return None
    partial = path.with_name(f".{FILE}.partial")
    since = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    partial.write_text(json.dumps({"reasons": found, "since": since}))
    os.replace(partial, path)
    return path
