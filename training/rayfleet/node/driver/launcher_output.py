"""What a failed launcher node printed, made short: the user script's own traceback out of torchrun's or
accelerate's wrapping, or the last lines; and the report of the node that failed first."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

RANK_PREFIX = re.compile(r"^\[rank\d+\]: ?")  # torchrun's prefix on its workers' stderr


TRACEBACK = "Traceback (most recent call last)"
# The launcher's own exception when a rank failed: a rank killed by a signal (an abort in C++) prints no
# traceback of its own, so the first traceback is the launcher's and the rank's last words come before it.
LAUNCHER_FAILURES = ("ChildFailedError", "CalledProcessError")
BEFORE = 20  # lines kept from before the launcher's traceback


def traceback_bounds(lines: list[str]) -> tuple[int, int] | None:
    """[start, end) of the first traceback (the script's own: a launcher's comes after it), through the
    exception's line; None if there is none."""
    plain = [RANK_PREFIX.sub("", line) for line in lines]
    start = next((i for i, line in enumerate(plain) if line.startswith(TRACEBACK)), None)
    if start is None:
        return None
    end = start + 1
    while end < len(plain) and (plain[end].startswith((" ", "\t")) or not plain[end].strip()):
        end += 1
    return start, min(end + 1, len(lines))


def launchers_own(lines: list[str], bounds: tuple[int, int]) -> bool:
    return any(name in lines[bounds[1] - 1] for name in LAUNCHER_FAILURES)


def script_traceback(lines: list[str]) -> list[str]:
    bounds = traceback_bounds(lines)
    if bounds is None or launchers_own(lines, bounds):
        return []
    return [RANK_PREFIX.sub("", line) for line in lines[slice(*bounds)]]


def excerpt(lines: list[str], last: int = 12) -> list[str]:
    """The first traceback and the last lines (the launcher's summary: which rank, which exit code). When
    that traceback is the launcher's own, the lines before it too: a rank's abort message is there."""
    bounds = traceback_bounds(lines)
    if bounds is None:
        return lines[-40:]
    start, end = bounds
    if launchers_own(lines, bounds):
        start = max(0, start - BEFORE)
    rest = lines[max(end, len(lines) - last) :]
    return lines[start:end] + (["..."] if end < len(lines) - last else []) + rest


LOST = -9  # the exit code reported for a node whose actor died (its node was lost)


@dataclass(frozen=True)
class Failure:
    rank: int
    code: int
    failed_at: float  # wall clock on the node (its first traceback, else its exit): which failed first
    tail: list[str]


def report(failure: Failure) -> None:
    """Last in the job's output, after the other nodes have stopped: the failed node's traceback and last
    lines, then the script's traceback unprefixed, so the tail `make run` prints is the script's own."""
    if failure.code == LOST:
        print(f"[rayfleet] error: node {failure.rank} was lost (its Ray actor died)", file=sys.stderr, flush=True)
        return
    rank, shown, own = failure.rank, excerpt(failure.tail), script_traceback(failure.tail)
    print(f"[rayfleet] error: node {rank} exited {failure.code}; its output:", file=sys.stderr, flush=True)
    for line in shown:
        print(f"[node {rank}] {line}", file=sys.stderr, flush=True)
    if own:
        print(f"[rayfleet] node {rank}: the script's traceback", file=sys.stderr, flush=True)
        print("\n".join(own), file=sys.stderr, flush=True)
