"""Serve's application details (GET /api/serve/applications/) as short rows, for `serve-status` and `status`."""

from __future__ import annotations

from collections import Counter


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
    if not apps:
        return ["no Serve applications"]
    out = []
    for app in apps:
        out.append(f"{app['name']}  {app['status']}  route {app['route_prefix']}")
        for dep in app["deployments"]:
            replicas = ", ".join(f"{n} {state}" for state, n in dep["replicas"].items()) or "no replicas"
            out.append(f"  {dep['name']}: {dep['status']} ({replicas})")
        if app["message"] and app["status"] != "RUNNING":
            out.append("  " + app["message"].splitlines()[-1][:300])
    return out
