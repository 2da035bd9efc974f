"""Draw runs' curves into one PNG: loss, accuracy or perplexity, and throughput, no server needed; and their
goodput ledgers beside it, one stacked bar per run (<out>-ledger.png).

rayfleet runs plot --run RUN [--run RUN ...] [--runs-dir runs|s3://b/runs] [--out curves.png]
"""

from __future__ import annotations

import sys
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.core.moved import gone
from rayfleet.core.terminal import printable
from rayfleet.ops.runs import ledger_plot
from rayfleet.ops.runs.arg import run_dirs
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking import curves


def plot_runs(runs: list[str], runs_dir: str, out: Path | None = None) -> int:
    """`rayfleet runs plot`: the runs' curves in one PNG (default: plots/<run>+<run>.png)."""
    try:
        dirs = run_dirs(runs, runs_dir)
        rows = {r.run_name: read_rows(r) for r in dirs}
        written = curves.draw(rows, out or Path("plots") / f"{'+'.join(rows)}.png")
        found, missing = ledger_plot.ledgers(dirs)
    except curves.NothingToPlot as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (BotoCoreError, ClientError) as exc:
        print(f"error: cannot read the runs: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {written} ({', '.join(f'{name}: {len(points)} points' for name, points in rows.items())})")
    if found:
        bars = ledger_plot.draw(found, written.with_name(f"{written.stem}-ledger.png"))
        print(f"wrote {bars} (the goodput ledger of {', '.join(found)})")
    if missing:
        print(
            f"no goodput ledger for {', '.join(printable(m) for m in missing)} (a run from before ledgers, or running)"
        )
    return 0


if __name__ == "__main__":  # the module's command line before `rayfleet` took it over
    gone("python -m rayfleet.ops.runs.plot", "rayfleet runs plot --run RUN")
