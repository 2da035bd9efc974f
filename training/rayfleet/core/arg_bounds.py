"""Numbers on a command line, bounded where they are parsed: argparse `type=` functions that refuse a value
out of range, and for floats also nan and inf (float() accepts "nan", "inf" and "1e300"), so a bad flag is
the parser's one-line refusal with exit 2 rather than a failure (exit 1) deep in the work."""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable

from rayfleet.core import worker_groups
from rayfleet.core.errors import ConfigError


def int_in(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is out of range: {low}..{high}")
        return value

    parse.__name__ = "int"  # argparse names the type in its messages
    return parse


def float_in(low: float, high: float, low_open: bool = False) -> Callable[[str], float]:
    """A finite float in [low, high], or (low, high] when `low_open`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        above = value > low if low_open else value >= low
        if not math.isfinite(value) or not above or value > high:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"{text} is out of range: {bracket}{low:g}, {high:g}]")
        return value

    parse.__name__ = "float"
    return parse


def group_name(text: str) -> str:
    """`--group NAME`: a worker group's name, checked as Ray and Terraform take it."""
    try:
        return worker_groups.check_name(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def group_arg(text: str) -> tuple[str, int, int]:
    """`--group NAME=NODES[xGPUS]` -> (name, nodes, GPUs per node)."""
    found = re.fullmatch(r"([^=]+)=(\d+)(?:x(\d+))?", text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=NODES or NAME=NODESxGPUS (as in large=1x4)")
    try:
        name = worker_groups.check_name(found[1])
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    nodes, gpus = int(found[2]), int(found[3] or 0)
    if not 1 <= nodes <= 50 or gpus > 64:
        raise argparse.ArgumentTypeError(f"{text!r}: 1-50 nodes and at most 64 GPUs per node")
    return name, nodes, gpus
