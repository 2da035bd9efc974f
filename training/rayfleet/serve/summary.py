"""Serve's application details (GET /api/serve/applications/) as short rows, for `serve-status` and `status`."""

from __future__ import annotations

from collections import Counter

from rayfleet.core.terminal import printable


def summarize(details: dict) -> list[dict]:
    rows = []
    for name, app in sorted((details.get("applications") or {}).items()):
        deployments = []
        for dep_name, dep in sorted((app.get("deployments") or {}).items()):
            states = Counter(r.get("state", "?") for r in dep.get("replicas") or [])
            deployments.append(
                {"name": dep_name, "status": dep.get("status"), "replicas": dict(sorted(states.items()))}
            )
        rows.append(
            {
                "name": name,
                "status": app.get("status"),
                "route_prefix": app.get("route_prefix"),
                "message": (app.get("message") or "").strip(),
                "deployments": deployments,
            }
        )
    return rows


def lines(apps: list[dict]) -> list[str]:
    """For a terminal. Applications, deployments, their states and messages are what Serve reports of code a
    job deployed (any job can run serve.run), so every field is shown without control characters."""
    if not apps:
        return ["no Serve applications"]
    out = []
    for app in apps:
        out.append(printable(f"{app['name']}  {app['status']}  route {app['route_prefix']}"))
        for dep in app["deployments"]:
            replicas = ", ".join(f"{n} {state}" for state, n in dep["replicas"].items()) or "no replicas"
            out.append(printable(f"  {dep['name']}: {dep['status']} ({replicas})"))
        if app["message"] and app["status"] != "RUNNING":
            out.append("  " + printable(app["message"].splitlines()[-1][:300]))
    return out
