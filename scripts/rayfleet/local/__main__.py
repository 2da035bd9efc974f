"""`python -m rayfleet.local ...`, the local cluster's command line before `rayfleet cluster` took it over."""

from rayfleet.core.moved import gone

gone("python -m rayfleet.local", "rayfleet cluster up|down|status|env|run|replace-head")
