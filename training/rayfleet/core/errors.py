"""The error base of rayfleet, and the exit codes every entry point uses.

An error the user can act on is a `RayfleetError` whose message is one line saying what went wrong and
what to do; entry points print it as `error: <message>` on stderr, without a traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # the work failed: a job, an AWS call, a cluster start
EXIT_BAD_INPUT = 2  # refused before doing anything: a config, recipe or argument (as argparse does)
EXIT_INTERRUPTED = 130
EXIT_HEAD_LOST = 75  # a queued run's driver lost the head before its run was admitted: rejoin and resubmit


class RayfleetError(Exception):
    """What went wrong and what to do, in one line."""


class ConfigError(RayfleetError, ValueError):
    """A config or recipe the program cannot run with; the message names every offending key."""
