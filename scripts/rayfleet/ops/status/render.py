"""`rayfleet status`'s screen, from what gather.py collected. Fields a job could have written (run names,
states, reasons, job ids, Serve names) go through rayfleet/core/terminal.py printable() before they reach the
terminal."""

from __future__ import annotations

from datetime import UTC, datetime

from rayfleet.core.run_queue import HELD, WAITING
from rayfleet.core.terminal import printable
from rayfleet.ops.runs.queued import IGNORED
from rayfleet.ops.status import goodput
from rayfleet.ops.status.gather import SNAPSHOT_INTERVAL_S, STALE_AFTER_S
from rayfleet.serve.summary import lines as serve_lines


def queue_line(queue: list[dict]) -> str:
    """One line for the queue: how many runs wait (held among them) and run, the first in line and why."""
    if not queue:
        return "  empty: nothing waits and no queued run runs"
    waiting = [r for r in queue if r["state"] == WAITING]
    held = [r for r in queue if r["state"] == HELD]
    ignored = sum(1 for r in queue if r["state"] == IGNORED)
    running = len(queue) - len(waiting) - len(held) - ignored
    line = f"  {running} running, {len(waiting)} waiting" + (f", {len(held)} held by the budget" if held else "")
    line += f", {ignored} ignored (forged or unreadable)" if ignored else ""
    first = (waiting or held or [None])[0]
    shown = f"; next: {printable(first['run'])} ({printable(first['reason'])})" if first else ""
    return line + shown + "; `rayfleet queue` for all"


def _amount(name: str, value: float) -> str:
    return f"{value / 2**30:.1f}" if name in ("memory", "object_store_memory") else f"{value:g}"


def render_ray(ray: dict, jobs: int = 5) -> list[str]:
    """Ray's view from the head's snapshot (rayfleet/node/control/head_snapshot.py): nodes, resources, jobs. A
    snapshot without some part (another version's head wrote it) shows what it has, never a traceback."""
    nodes = ray.get("nodes", [])
    alive = [n for n in nodes if n.get("alive")]
    heads = sum(1 for n in alive if n.get("head"))
    workers = len(alive) - heads
    dead = len(nodes) - len(alive)
    total, free = ray.get("total", {}), ray.get("available", {})
    shown = [k for k in ("CPU", "GPU", "memory") if k in total]
    used = ", ".join(
        f"{k} {_amount(k, free[k]) if k in free else '?'}/{_amount(k, total[k])}{' GiB' if k == 'memory' else ''} free"
        for k in shown
    )
    lines = [
        f"  {len(alive)} nodes alive ({heads} head, {workers} worker{'s' if workers != 1 else ''})"
        + (f", {dead} dead" if dead else "")
        + f"; {used}"
    ]
    for n in alive:
        resources = ", ".join(f"{k} {_amount(k, v)}" for k, v in n.get("resources", {}).items() if k in ("CPU", "GPU"))
        lines.append(
            f"    {'head' if n.get('head') else 'worker':<8}{printable(n.get('node_id', '?')):<14}"
            f"{printable(n.get('address') or '?'):<16}"
            f"{resources}"
        )
    if "serve" in ray:  # application and deployment names and messages come from the jobs that deployed them
        lines.append("  serve: " + "\n    ".join(printable(line) for line in serve_lines(ray["serve"])))
    if ray.get("serve_kept"):
        lines.append(f"  serve kept: {kept_line(ray['serve_kept'])}")
    if "autostop" in ray:
        lines.append(f"  autostop: {autostop_line(ray['autostop'])}")
    lines += [f"  queue: {line}" for line in queue_capacity_lines(ray.get("queue_capacity") or {})]
    listed = ray.get("jobs") or []
    lines.append(f"  jobs ({len(listed)})" + ("" if listed else ": none"))
    for j in listed[:jobs]:
        started = j.get("start_time")
        when = datetime.fromtimestamp(started / 1000, UTC).strftime("%Y-%m-%d %H:%M") if started else "-"
        name, state = printable(j.get("submission_id") or j.get("job_id") or "?"), printable(j.get("status") or "?")
        lines.append(f"    {name:<28}{state:<11}{when}")
    return lines


def kept_line(kept: dict) -> str:
    """The Serve config `make serve` keeps, as the control task found it (rayfleet/core/serve_kept.py)."""
    if "error" in kept:
        return f"unreadable ({printable(kept['error'])})"
    again = f"; applied again to this head: {printable(', '.join(kept['reapplied']))}" if kept.get("reapplied") else ""
    return f"run {printable(kept['run'])} (a restarted head gets it back; rayfleet serve down ends it){again}"


def autostop_line(decided: dict | None) -> str:
    """What the head's autostop decided with its last snapshot (rayfleet/node/control/autostop.py): per worker
    group (and the head, where it stops too), or that the whole cluster is busy."""
    if decided is None:
        return "off"
    if "error" in decided:
        return f"cannot decide ({decided['error']})"
    busy = f"not idle ({printable(decided['busy'])})" if "busy" in decided else ""
    if "groups" not in decided:
        if busy:  # work that no one group holds: every group counts as busy
            return f"{busy}; each group stops after its idle minutes"
        return _unit_line(decided)  # a control task of the single-group versions
    units = [f"{printable(unit)}: {_unit_line(d)}" for unit, d in decided["groups"].items()]
    return "; ".join(([busy] if busy else []) + units)


def _unit_line(decided: dict) -> str:
    if decided.get("busy") is True:
        return "in use"
    what = " and ".join(decided["stops"])
    if decided["stopped"]:
        return f"{what} stopped at {decided['stops_at']} (idle since {decided['idle_since']}); `rayfleet deploy start`"
    return f"{what} stop at {decided['stops_at']} unless a run needs them (idle since {decided['idle_since']})"


def queue_capacity_lines(decided: dict) -> list[str]:
    """What the run queue asked of each worker group with the last snapshot (node/control/queue_scaling.py)."""
    if "error" in decided:
        return [f"cannot read it ({printable(str(decided['error']))})"]
    lines = []
    for group, asked in decided.items():
        if not isinstance(asked, dict) or not asked.get("wanted"):
            continue
        raised = f", raised from {asked['raised_from']}" if "raised_from" in asked else ""
        why = printable(str(asked.get("why")))
        lines.append(
            f"{printable(group)} needs {asked['wanted']} node(s): {why} (its service wants {asked['desired']}{raised})"
        )
    return lines


def group_line(g: dict) -> str:
    """One worker group: running/desired nodes (of its max), GPUs, $/h of the running nodes, its waiting runs."""
    nodes = f"{g['running']}/{g['desired']} of {g['max']}"
    first = g.get("first")
    waiting = f"{g['waiting']}" + (
        f" ({printable(first['run'])}: {printable(first['reason'] or '')}, {round((first['since_s'] or 0) / 60)} min)"
        if first
        else ""
    )
    return f"  {printable(g['group']):<14}{nodes:<9}{g['gpus']:<7}{g['usd_per_hour']:<7.2f}{waiting}"


def stale_line(age_s: float | None) -> str:
    """The warning over a Ray view the control task has stopped refreshing."""
    age = "of unknown age" if age_s is None else f"{age_s:.0f} s old"
    return (
        f"  STALE: this view is {age} (the control task writes one every {SNAPSHOT_INTERVAL_S} s; stale after "
        f"{STALE_AFTER_S} s): the ray-control service is stopped or cannot read the head (its log says why); "
        "what follows is the cluster as it was"
    )


def render(s: dict) -> str:
    lines = [f"cluster {s['cluster']} ({s['region']})", "", "services        desired running pending"]
    lines += [f"  {v['name']:<14}{v['desired']:>7}{v['running']:>8}{v['pending']:>8}" for v in s["services"]]
    lines += ["", "tasks"]
    lines += [
        f"  {t['role']:<8}{t['task'][:12]:<14}{t['status']:<10}{t['health']:<10}{t['instance_type']:<14}{t['gpus']} GPU"
        for t in s["tasks"]
    ] or ["  (none running)"]
    if s.get("groups"):
        lines += ["", "worker groups   nodes    GPUs   $/h    waiting"]
        lines += [group_line(g) for g in s["groups"]]
    if s.get("capacity"):  # only when instances are not coming: an empty section would be noise
        lines += ["", "capacity (the last hour: why instances are not coming)"]
        lines += [f"  {'cannot come: ' if r['fatal'] else ''}{r['reason']}" for r in s["capacity"]]
    ray = s["ray"]
    lines += ["", "ray (as the head reports it" + (f", {printable(ray.get('taken_at'))})" if ray else ")")]
    if ray and s.get("ray_stale"):
        lines.append(stale_line(s.get("ray_age_s")))
    lines += (
        render_ray(ray)
        if ray
        else [f"  no snapshot yet: the ray-control task writes one every {SNAPSHOT_INTERVAL_S} s"]
    )
    if "queue" in s:
        lines += ["", "queue", queue_line(s["queue"])]
    if s.get("goodput"):
        lines += ["", "goodput (where the worker nodes' time went)", goodput.line(s["goodput"])]
    lines += ["", "recent runs"]
    lines += [
        f"  {printable(r['run']):<28}{printable(r['state']):<20}{printable(r['last_checkpoint'] or '-'):<22}"
        f"{printable(r['results'])}"
        for r in s["runs"]
    ] or ["  (none)"]
    unknown = f" (+ unpriced: {', '.join(s['cost_unknown_types'])})" if s["cost_unknown_types"] else ""
    lines += [
        "",
        f"cost: ${s['cost_per_hour_usd']:.2f}/hour for {len(s['instances'])} instance(s){unknown}; "
        f"prices {s['prices_as_of']}; `rayfleet deploy stop` scales to zero",
    ]
    if s.get("running_since"):
        lines.append(f"spent: ~${s['spent_usd']:,.2f} since the instances running now started ({s['running_since']})")
    return "\n".join(lines)
