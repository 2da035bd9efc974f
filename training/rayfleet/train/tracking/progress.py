"""A progress line at a steady cadence, so a long epoch or a 7B run is never minutes of silence."""

from __future__ import annotations

import time
from collections.abc import Callable


def duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class Progress:
    """`due()` is cheap (a clock read), so it can be asked every step; `line()` formats one when due.

    `total` and `done` count steps over the whole run; a resumed run starts at its checkpoint's step, and the
    rate (hence the remaining time) is measured from there.
    """

    def __init__(self, total: int, start: int, every_s: float, clock: Callable[[], float] = time.monotonic):
        self.total, self.start, self.every_s, self.clock = total, start, every_s, clock
        self.started = self.last = clock()

    def due(self) -> bool:
        return self.every_s > 0 and self.clock() - self.last >= self.every_s

    def line(self, done: int, what: str, values: dict[str, str]) -> str:
        now = self.clock()
        self.last = now
        elapsed = now - self.started
        rate = (done - self.start) / elapsed if elapsed > 0 else 0.0
        remaining = f"~{duration((self.total - done) / rate)}" if rate > 0 else "?"
        shown = "  ".join(f"{key} {value}" for key, value in values.items())
        return f"{what}  step {done}/{self.total}  {shown}  elapsed {duration(elapsed)}  remaining {remaining}"
