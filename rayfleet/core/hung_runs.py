"""How a hung run shows itself to the control task beside the head, which reads Ray only through the head's
dashboard (rayfleet/node/head_snapshot.py): while the hang watchdog holds a hang verdict for a run
(rayfleet/train/hang_watch.py), an actor of no resources named `marker(run)` is alive; autostop does not count
that run as work (rayfleet/node/autostop.py)."""

from __future__ import annotations

PREFIX = "rayfleet-hung-"


def marker(run_name: str) -> str:
    return f"{PREFIX}{run_name}"


def runs(actor_names: list[str]) -> list[str]:
    """The hung runs among alive actors' names."""
    return sorted(name.removeprefix(PREFIX) for name in actor_names if name and name.startswith(PREFIX))
