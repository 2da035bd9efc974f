"""The instance catalog: hourly cost of a fleet, unknown types named."""

from __future__ import annotations

import pytest

from rayfleet.core.catalog import hourly_cost


def test_cost_sums_known_types_and_names_unknown_ones():
    cost, unknown = hourly_cost(["g5.xlarge", "g5.xlarge", "m5.xlarge", "x9.huge"])
    assert cost == pytest.approx(2.204) and unknown == ["x9.huge"]
