"""Old names that users may still have in their shell history or scripts: each fails in one line that names
what replaced it (exit 2), instead of doing nothing or something else."""

from __future__ import annotations

import sys
from typing import NoReturn

from rayfleet.core.errors import EXIT_BAD_INPUT


def gone(old: str, new: str) -> NoReturn:
    print(f"error: `{old}` is gone: use `{new}` (rayfleet --help lists the verbs)", file=sys.stderr)
    sys.exit(EXIT_BAD_INPUT)
