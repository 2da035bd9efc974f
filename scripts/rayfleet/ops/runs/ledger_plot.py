"""The runs' goodput ledgers (rayfleet/core/ledger.py) as one stacked bar each: where each run's time went."""

from __future__ import annotations

import math
from pathlib import Path

from rayfleet.core.ledger import LABELS, LEDGER, PHASES, UNACCOUNTED
from rayfleet.core.run_dir import RunDir

ORDER = (*PHASES, UNACCOUNTED)


def valid_seconds(ledger) -> dict[str, float] | None:
    """A ledger's seconds by phase, or None when it is not one a driver writes (runs/ is the jobs' to write)."""
    if not isinstance(ledger, dict) or not isinstance(ledger.get("phases"), list):
        return None
    found: dict[str, float] = {}
    for row in ledger["phases"]:
        phase, seconds = (row.get("phase"), row.get("seconds")) if isinstance(row, dict) else (None, None)
        ok = isinstance(seconds, int | float) and not isinstance(seconds, bool) and math.isfinite(seconds)
        if phase not in ORDER or not ok or seconds < 0 or phase in found:
            return None
        found[phase] = float(seconds)
    return found


def ledgers(run_dirs: list[RunDir]) -> tuple[dict[str, dict[str, float]], list[str]]:
    """The runs' ledgers by run, and the runs that have none (or one that is not a ledger)."""
    found, missing = {}, []
    for run_dir in run_dirs:
        seconds = valid_seconds(run_dir.record().get(LEDGER))
        if seconds is None:
            missing.append(run_dir.run_name)
        else:
            found[run_dir.run_name] = seconds
    return found, missing


def draw(runs: dict[str, dict[str, float]], path: Path) -> Path:
    """One horizontal bar per run, its phases stacked in the order a run goes through them (minutes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.6 * len(runs)))
    colours = plt.get_cmap("tab20")
    names = list(runs)
    for index, phase in enumerate(ORDER):
        widths = [runs[name].get(phase, 0.0) / 60 for name in names]
        if not any(widths):
            continue
        lefts = [sum(runs[name].get(p, 0.0) for p in ORDER[:index]) / 60 for name in names]
        colour = "lightgrey" if phase == UNACCOUNTED else colours(index)
        ax.barh(names, widths, left=lefts, color=colour, label=LABELS[phase])
    ax.set_xlabel("minutes")
    ax.set_title("where each run's time went (goodput ledger)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
