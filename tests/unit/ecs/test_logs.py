"""`rayfleet logs`: --since as a duration or an ISO time."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rayfleet.core.aws import RayfleetError
from rayfleet.ecs.logs import parse_since


def test_since_accepts_durations_and_iso_times():
    now_ms = datetime.now(UTC).timestamp() * 1000
    assert abs(parse_since("10m") - (now_ms - 600_000)) < 5_000
    assert abs(parse_since("2h") - (now_ms - 7_200_000)) < 5_000
    assert parse_since("2026-11-22T10:00") == int(datetime(2026, 11, 22, 10, tzinfo=UTC).timestamp() * 1000)
    assert parse_since(None) is None
    with pytest.raises(RayfleetError, match="use 30s, 10m"):
        parse_since("last week")
