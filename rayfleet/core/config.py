"""Strict typed configs: a YAML file + `key=value` overrides, rejected early with the key named.

Used by the jobs (rayfleet.train.job_config) and the recipes (rayfleet.recipes.schema). Loading is strict: unknown
keys, wrong types ("10" for an int) and out-of-range values fail before anything starts, and the message
names the key and what is allowed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from rayfleet.core.errors import ConfigError

T = TypeVar("T", bound="StrictModel")


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-3` as a float (YAML 1.1 wants `1.0e-3`; people write `1e-3`)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(text: str):
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


__all__ = ["ConfigError", "StrictModel", "describe_error", "load_config", "load_yaml", "merge", "parse_overrides"]


class StrictModel(BaseModel):
    """Unknown keys, wrong types and missing validation are errors; instances are immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, validate_default=True)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def parse_overrides(overrides: list[str]) -> dict:
    """`a=1 b.c=x` -> {"a": 1, "b": {"c": "x"}}; values are read as YAML scalars (1, 1e-3, true, null)."""
    result: dict = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not key=value")
        try:
            value = load_yaml(raw) if raw else ""
        except yaml.YAMLError as exc:
            raise ConfigError(f"override {item!r}: value is not valid YAML ({exc})") from exc
        node = result
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return result


def merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def describe_error(error: dict) -> str:
    if not error["loc"]:  # a cross-field check: its message starts with the key it is about
        return error["msg"].removeprefix("Value error, ")
    key = ".".join(str(part) for part in error["loc"])
    if error["type"] == "value_error":  # our own validators already say what they got
        return f"{key}: {error['msg'].removeprefix('Value error, ')}"
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown key"
    got = error.get("input")
    got_text = f" (got {got!r})" if not isinstance(got, dict) else ""
    return f"{key}: {error['msg']}{got_text}"


def load_config(cls: type[T], path: str | Path | None, overrides: list[str] | None = None) -> T:
    data: dict = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist")
        loaded = load_yaml(path.read_text()) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of keys to values")
        data = loaded
    data = merge(data, parse_overrides(overrides or []))
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        problems = "\n  ".join(describe_error(e) for e in exc.errors())
        source = f" in {path}" if path else ""
        raise ConfigError(f"invalid {cls.__name__}{source}:\n  {problems}") from None
