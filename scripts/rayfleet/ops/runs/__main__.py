"""`python -m rayfleet.ops.runs`: the module's command line before `rayfleet` took it over."""

from rayfleet.core.moved import gone

gone("python -m rayfleet.ops.runs", "rayfleet runs")
