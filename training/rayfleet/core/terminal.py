"""Text a job could have written, made safe to print on the operator's terminal."""

from __future__ import annotations

import re
import unicodedata

# C0 and C1 control characters and DEL: an escape sequence in a job-written field (a run name, a reason, an
# error line) could otherwise move the cursor, retitle the window or hide rows of the table it is printed in.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Unicode's invisible format characters (bidirectional overrides and isolates, zero-width ones) and line and
# paragraph separators: they reorder or hide what a table shows without being control characters.
_HIDDEN = ("Cf", "Zl", "Zp")


def printable(text: object) -> str:
    """`text` as one line with every control, format or separator character shown as `?` (tabs and newlines
    included)."""
    shown = _CONTROL.sub("?", str(text))
    if shown.isascii():
        return shown
    return "".join("?" if unicodedata.category(c) in _HIDDEN else c for c in shown)
