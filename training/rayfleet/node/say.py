"""The node entry point's one way to talk: a prefixed line on stdout, flushed (ECS ships it to CloudWatch)."""

from __future__ import annotations


def say(message: str) -> None:
    print(f"rayfleet-node: {message}", flush=True)
