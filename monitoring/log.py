"""Structured log lines: one JSON object per line on stdout (CloudWatch Logs Insights parses them)."""

from __future__ import annotations

import json
import sys
import time


def log(event: str, level: str = "info", **fields) -> None:
    record = {"ts": round(time.time(), 3), "level": level, "event": event, **fields}
    print(json.dumps(record, default=str), file=sys.stdout, flush=True)
