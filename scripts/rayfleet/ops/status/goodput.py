"""The deployment's goodput over the last WINDOW, for `rayfleet status`: the goodput ledgers of its runs summed
(rayfleet/core/ledger.py), plus the worker nodes' time that no run used (up, idle, and not yet taken away by
autostop), priced at the list price, and the biggest loss among them.

The worker nodes' time comes from what AWS keeps, never from a job: the GPU instances up now (their launch
times) and the Auto Scaling groups' launch and termination activities of the window. The runs' ledgers are in
runs/, which the jobs may write: a ledger whose rows are not a ledger's is left out. List prices, so an estimate
(a Spot node costs less); the head instance is the cluster's, not the runs', and not counted.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from datetime import datetime, timedelta

from rayfleet.core.catalog import INSTANCE_TYPES
from rayfleet.core.ledger import LABELS, PHASES, UNACCOUNTED
from rayfleet.ecs.outputs import Outputs

WINDOW = timedelta(days=7)
IDLE = "idle"
IDLE_LABEL = "nodes idle between runs"
_INSTANCE = re.compile(r"\bi-[0-9a-f]+\b")


def _price(instance_type: str) -> float:
    return float((INSTANCE_TYPES.get(instance_type) or {}).get("usd_per_hour") or 0.0)


def worker_usd(out: Outputs, running: list[dict], activities: dict[str, list[dict]], since, now) -> float:
    """What the worker nodes cost within [since, now]: the GPU instances up now from their launch, and each
    instance an Auto Scaling activity of the window terminated, from its launch (or the window's start)."""
    usd, seen = 0.0, set()
    for instance in running:
        if not instance.get("gpus"):
            continue  # the head: the cluster's
        start = max(instance.get("launch_time") or since, since)
        usd += max((now - start).total_seconds(), 0.0) / 3600 * _price(instance["instance_type"])
        seen.add(instance["instance_id"])
    for name, found in activities.items():
        group = out.worker_groups.get(name)
        price = _price(group.instance_type) if group else 0.0
        launched, ended = {}, {}
        for activity in found:
            which = _INSTANCE.search(str(activity.get("Description") or ""))
            if not which or activity.get("StatusCode") != "Successful":
                continue
            if str(activity.get("Description")).startswith("Launching"):
                launched[which.group(0)] = activity["StartTime"]
            elif str(activity.get("Description")).startswith("Terminating"):
                ended[which.group(0)] = activity.get("EndTime") or activity["StartTime"]
        for instance_id, end in ended.items():
            if instance_id not in seen:
                start = max(launched.get(instance_id, since), since)
                usd += max((min(end, now) - start).total_seconds(), 0.0) / 3600 * price
    return usd


def ledger_usd(ledger) -> dict[str, float] | None:
    """A ledger's dollars by phase, or None when it is not one a follower writes."""
    rows = ledger.get("phases") if isinstance(ledger, dict) else None
    if not isinstance(rows, list):
        return None
    found: dict[str, float] = {}
    for row in rows:
        phase, usd = (row.get("phase"), row.get("usd")) if isinstance(row, dict) else (None, None)
        ok = isinstance(usd, int | float) and not isinstance(usd, bool) and math.isfinite(usd) and usd >= 0
        if phase not in (*PHASES, UNACCOUNTED) or not ok or phase in found:
            return None
        found[phase] = float(usd)
    return found


def summary(ledgers: list, nodes_usd: float | None) -> dict:
    """The window's goodput: compute's share of what the worker nodes cost (the runs' ledgers, and the idle
    time no run used), the idle cost, and the biggest loss."""
    by_phase: dict[str, float] = defaultdict(float)
    counted = 0
    for ledger in ledgers:
        usd = ledger_usd(ledger)
        if usd is not None:
            counted += 1
            for phase, value in usd.items():
                by_phase[phase] += value
    runs_usd = sum(by_phase.values())
    idle = max(nodes_usd - runs_usd, 0.0) if nodes_usd is not None else None
    total = runs_usd + (idle or 0.0)
    losses = {LABELS[p]: v for p, v in by_phase.items() if p != "compute"} | ({IDLE_LABEL: idle} if idle else {})
    worst = max(losses, key=losses.get) if losses and total else None
    return {
        "days": WINDOW.days,
        "runs": counted,
        "usd": round(total, 2),
        "idle_usd": None if idle is None else round(idle, 2),
        "goodput": round(by_phase["compute"] / total, 4) if total else None,
        "biggest_loss": None if worst is None else {"what": worst, "share": round(losses[worst] / total, 4)},
    }


def line(s: dict) -> str:
    if s["goodput"] is None:
        return f"  no priced run or worker node time in the last {s['days']} days"
    idle = "idle cost unknown" if s["idle_usd"] is None else f"idle ${s['idle_usd']:,.2f}"
    loss = s["biggest_loss"]
    worst = f"; biggest loss: {loss['what']} {loss['share'] * 100:.0f}%" if loss else ""
    return (
        f"  {s['goodput'] * 100:.0f}% of ${s['usd']:,.2f} of worker time went to compute, last {s['days']} days "
        f"({s['runs']} run(s); {idle}){worst}"
    )


def within(rows: list[dict], since: datetime) -> list:
    """The ledgers of the runs listed (rayfleet runs' rows) that started within the window."""
    return [r.get("ledger") for r in rows if str(r.get("started") or "") >= since.isoformat(timespec="seconds")]
