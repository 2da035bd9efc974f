"""Text a job could have written, made safe to print on the operator's terminal."""

from __future__ import annotations

import re

# C0 and C1 control characters and DEL: an escape sequence in a job-written field (a run name, a reason, an
# error line) could otherwise move the cursor, retitle the window or hide rows of the table it is printed in.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """`text` as one line with every control character shown as `?` (tabs and newlines included)."""
    return _CONTROL.sub("?", str(text))
