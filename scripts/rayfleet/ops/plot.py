"""Draw runs' curves into one PNG: loss, accuracy or perplexity, and throughput, no server needed.

python -m rayfleet.ops.plot RUN [RUN ...] [--runs-dir runs|s3://b/runs] [--out curves.png]
make plot RUN=ddp-20261124-101500 [RUNS="other-run"]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED
from rayfleet.ops.runs_arg import add_arguments, run_dirs
from rayfleet.train.metrics import read_rows
from rayfleet.train.tracking import curves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rayfleet.ops.plot", description=__doc__.split("\n")[0])
    add_arguments(parser)
    parser.add_argument("--out", type=Path, help="the PNG (default: plots/<first run>.png)")
    opts = parser.parse_args(argv)
    try:
        runs = {r.run_name: read_rows(r) for r in run_dirs(opts)}
        out = curves.draw(runs, opts.out or Path("plots") / f"{'+'.join(runs)}.png")
    except curves.NothingToPlot as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (BotoCoreError, ClientError) as exc:
        print(f"error: cannot read the runs: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"wrote {out} ({', '.join(f'{name}: {len(rows)} points' for name, rows in runs.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
