"""A recipe run's goodput ledger (rayfleet/core/ledger.py), closed by the process that follows its job
(rayfleet/recipes/job.py): from the submission to the end, its queue wait (the job's admission sends it) and
the phases the job's rank 0 timed when it is a built-in job (ddp, fsdp); a launcher recipe's job times none,
and its ledger says so."""

from __future__ import annotations

import sys
import time

from rayfleet.core import ledger
from rayfleet.core.run_dir import RunDir

MAX_BEFORE_S = 7 * 24 * 3600.0  # a submission older than this is not the one this job follows


def close(run_dir: RunDir, began_at: float, held: dict) -> None:
    """The run's goodput ledger from its submission (rayfleet/core/ledger.py): its queue wait, and the phases
    the job's rank 0 timed, if it is a built-in job; into run.json (this process owns it) and printed."""
    record = run_dir.record()
    # what the submitter and the job's admission recorded: numbers or nothing, and bounded by build
    before = {p: record.get(k) for p, k in (("node_start", ledger.NODE_WAIT), ("queue", "queue_wait_s"))}
    before = {p: v for p, v in before.items() if isinstance(v, int | float) and not isinstance(v, bool)}
    submitted = record.get(ledger.SUBMITTED)
    if isinstance(submitted, int | float) and began_at - MAX_BEFORE_S <= submitted <= began_at:
        began_at = float(submitted)  # from `rayfleet run`'s start: the nodes' wait and the trainer's start too
    try:
        usd = float(held.get("usd_per_hour") or 0.0)
        built = ledger.build(began_at, time.time(), ledger.sent_events(record), usd, before_loop=before)
    except (ledger.LedgerError, TypeError, ValueError) as exc:  # phases a job sent that cannot be a ledger
        print(f"[rayfleet] run {run_dir.run_name}: no goodput ledger ({exc})", file=sys.stderr)
        return
    job = record.get("job_id")
    if isinstance(job, str):  # the run's page in Ray's dashboard (rayfleet dashboard --run)
        built["dashboard_page"] = f"/#/jobs/{job}"
    run_dir.update(ledger=built)
    versus = ledger.against(record.get("estimate"), built)
    shown = ledger.lines(built) + ([f"  {versus}"] if versus else [])
    shown.append(f"  its job in Ray's dashboard: rayfleet dashboard --run {run_dir.run_name}")
    print("\n".join(f"[rayfleet] {line}" for line in shown), flush=True)
