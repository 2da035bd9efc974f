"""One screen on the ECS cluster: services (head, workers and the control task), tasks, why capacity is not
coming (the Auto Scaling groups' failed launches and the services' placement events of the last hour:
rayfleet/ecs/capacity.py), Ray's view (flagged stale when the control task has not written it for
STALE_AFTER_S), recent runs, and what it costs per hour. Fields a job could have written (run names, states,
reasons, job ids, Serve names) go through rayfleet/core/terminal.py printable() before they reach the terminal.

rayfleet status [--json] [--runs 5]
"""

from __future__ import annotations

import json

from rayfleet.core.aws import Aws
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops.status.gather import status
from rayfleet.ops.status.render import render


def show_status(runs: int = 5, as_json: bool = False, outputs: str | None = None) -> int:
    """`rayfleet status`: one screen on the deployment (or its JSON), with the `runs` most recent runs."""
    out = Outputs.load(outputs)
    result = status(Aws(out.region), out, runs)
    print(json.dumps(result, indent=2) if as_json else render(result))
    return 0
