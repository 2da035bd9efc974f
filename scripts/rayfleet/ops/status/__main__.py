"""`python -m rayfleet.ops.status`: the module's command line before `rayfleet` took it over."""

from rayfleet.core.moved import gone

gone("python -m rayfleet.ops.status", "rayfleet status")
