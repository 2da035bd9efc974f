"""Render the CloudWatch dashboard from monitoring/metrics.json into the Terraform observability module.

    python -m monitoring.dashboard --write    # regenerate infra/modules/observability/dashboard.json.tftpl
    python -m monitoring.dashboard --check    # exit 1 if the committed template is stale (a test runs this)

Every widget is a metric SEARCH expression over the dimensions the sidecar publishes, scoped to one
cluster, so new instances and GPUs appear without re-applying and nothing names an instance or a GPU
model. Terraform fills in ${cluster_name} and ${region} with templatefile().
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from monitoring.spec import Spec, load

TEMPLATE = Path(__file__).resolve().parents[1] / "infra" / "modules" / "observability" / "dashboard.json.tftpl"
WIDTH, HEIGHT = 12, 6


def search(spec: Spec, metric: str, dimensions: tuple[str, ...], stat: str = "Average", period: int = 60) -> str:
    schema = ",".join((spec.namespace, *dimensions))
    return f"SEARCH('{{{schema}}} MetricName=\"{metric}\" ClusterName=\"${{cluster_name}}\"', '{stat}', {period})"


def _widget(index: int, title: str, expressions: list[str], stat: str = "Average") -> dict:
    return {
        "type": "metric",
        "x": (index % 2) * WIDTH,
        "y": (index // 2) * HEIGHT,
        "width": WIDTH,
        "height": HEIGHT,
        "properties": {
            "title": title,
            "region": "${region}",
            "view": "timeSeries",
            "stat": stat,
            "period": 60,
            "metrics": [[{"expression": e, "id": f"e{i}", "label": ""}] for i, e in enumerate(expressions)],
        },
    }


def render(spec: Spec) -> dict:
    widgets = []
    for metric in spec.metrics:  # per GPU: one line per (instance, GPU)
        widgets.append(_widget(len(widgets), metric.title, [search(spec, metric.name, spec.gpu_dimensions)]))
    for metric in (m for m in spec.metrics if m.rollup):  # per cluster and per run
        widgets.append(
            _widget(
                len(widgets),
                f"{metric.title}: cluster and runs",
                [
                    search(spec, metric.name, spec.cluster_dimensions, "Maximum"),
                    search(spec, metric.name, spec.run_dimensions),
                ],
            )
        )
    for metric in spec.sidecar_metrics:
        widgets.append(_widget(len(widgets), metric.title, [search(spec, metric.name, spec.cluster_dimensions, "Sum")]))
    for metric in spec.training_metrics:  # what each run's rank 0 publishes: one line per run
        widgets.append(_widget(len(widgets), metric.title, [search(spec, metric.name, spec.run_dimensions)]))
    return {"widgets": widgets}


def expressions(body: dict) -> list[str]:
    return [m[0]["expression"] for w in body["widgets"] for m in w["properties"]["metrics"]]


def parse_search(expression: str) -> tuple[str, str, tuple[str, ...]]:
    """(namespace, metric name, dimension names) of a SEARCH expression."""
    match = re.match(r"SEARCH\('\{([^}]*)\} MetricName=\"([^\"]+)\"", expression)
    if not match:
        raise ValueError(f"not a SEARCH expression of this dashboard: {expression}")
    namespace, *dimensions = match.group(1).split(",")
    return namespace, match.group(2), tuple(sorted(dimensions))


def text(spec: Spec) -> str:
    return json.dumps(render(spec), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true")
    action.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    wanted = text(load())
    if args.write:
        TEMPLATE.write_text(wanted)
        print(f"wrote {TEMPLATE}")
        return 0
    if not TEMPLATE.exists() or TEMPLATE.read_text() != wanted:
        print(f"{TEMPLATE} is stale: run python -m monitoring.dashboard --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
