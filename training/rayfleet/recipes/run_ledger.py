"""A recipe run's goodput ledger (rayfleet/core/ledger.py), closed by the process that follows its job
(rayfleet/recipes/job.py): from the submission to the end, its queue wait (the job's admission sends it) and
the phases the job's rank 0 timed when it is a built-in job (ddp, fsdp); a launcher recipe's job times none,
and its ledger says so."""

from __future__ import annotations

import sys
import time

from rayfleet.core import ledger
from rayfleet.core.run_dir import RunDir


def close(run_dir: RunDir, began_at: float, held: dict) -> None:
    """The run's goodput ledger from its submission (rayfleet/core/ledger.py): its queue wait, and the phases
    the job's rank 0 timed, if it is a built-in job; into run.json (this process owns it) and printed."""
    record = run_dir.record()
    waited = record.get("queue_wait_s")  # the job's admission sent it: bounded by build, and a number or nothing
    before = {"queue": waited} if isinstance(waited, int | float) and not isinstance(waited, bool) else {}
    try:
        usd = float(held.get("usd_per_hour") or 0.0)
        built = ledger.build(began_at, time.time(), ledger.sent_events(record), usd, before_loop=before)
    except (ledger.LedgerError, TypeError, ValueError) as exc:  # phases a job sent that cannot be a ledger
        print(f"[rayfleet] run {run_dir.run_name}: no goodput ledger ({exc})", file=sys.stderr)
        return
    run_dir.update(ledger=built)
    versus = ledger.against(record.get("estimate"), built)
    shown = ledger.lines(built) + ([f"  {versus}"] if versus else [])
    print("\n".join(f"[rayfleet] {line}" for line in shown), flush=True)
