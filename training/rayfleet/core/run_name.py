"""The run-name rule: a run name is a folder under ./runs and a prefix under s3://<bucket>/runs, so it is one
path segment of letters, digits, '.', '_' and '-' that starts with a letter or digit (never `.`, `..`, a
slash or an empty name). One rule for the jobs' config (rayfleet/train/job_config.py), the recipe runner and
every `--run`/`--name` of the `rayfleet` command: a verb that wrote `<storage>/<name>/stop.json` with the
name `..` would write `./stop.json` instead."""

from __future__ import annotations

import argparse
import re

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
RULE = "a run name is up to 100 letters, digits, '.', '_' or '-', starting with a letter or digit"


def valid(name: str) -> bool:
    return re.fullmatch(RUN_NAME_PATTERN, name) is not None


def run_name_arg(value: str) -> str:
    """An argparse `type=`: a name that breaks the rule is refused by the parser (one line, exit 2)."""
    if not valid(value):
        raise argparse.ArgumentTypeError(f"{value!r}: {RULE}")
    return value
