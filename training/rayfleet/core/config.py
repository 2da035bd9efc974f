"""Strict typed configs: a YAML file + `key=value` overrides, rejected early with the key named.

Used by the jobs (rayfleet.train.job_config) and the recipes (rayfleet.recipes.schema). Loading is strict: unknown
keys, wrong types ("10" for an int) and out-of-range values fail before anything starts, and the message
names the key and what is allowed. A file that is not UTF-8, not YAML, or says a key twice is one line, not a
traceback; no number is infinite or NaN (`.inf` is YAML for infinity, and a bound of `gt=0` lets it through).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from rayfleet.core.errors import ConfigError

T = TypeVar("T", bound="StrictModel")


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-3` as a float (YAML 1.1 wants `1.0e-3`; people write `1e-3`), and refuses a
    key said twice in one mapping (PyYAML keeps the last silently: `max_hours` twice is a mistake either way)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be overridden here
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark, f"key {key!r} appears twice", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def load_yaml(text: str):
    return yaml.load(text, Loader=_Loader)  # a SafeLoader subclass: no arbitrary objects


def read_yaml_file(path: Path, what: str):
    """The YAML document in `path` (`what` names it: "recipe", "config file"); ConfigError in one line when the
    file is missing, not UTF-8 text or not valid YAML (a key said twice included)."""
    if not path.is_file():
        raise ConfigError(f"{what} {path} does not exist")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {path} is not UTF-8 text (byte {exc.start}: {raw[exc.start]:#04x})") from None
    try:
        return load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} {path} is not valid YAML: {yaml_problem(exc)}") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """One line: PyYAML's own message spans several, with the context and a caret."""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    mark = getattr(exc, "problem_mark", None)
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


__all__ = [
    "ConfigError",
    "StrictModel",
    "describe_error",
    "load_config",
    "load_yaml",
    "merge",
    "parse_overrides",
    "read_yaml_file",
]


class StrictModel(BaseModel):
    """Unknown keys, wrong types and missing validation are errors; no number is infinite or NaN; instances are
    immutable."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, validate_default=True, allow_inf_nan=False)

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
            raise ConfigError(f"override {item!r}: value is not valid YAML ({yaml_problem(exc)})") from None
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


def packaged(path: Path) -> Path:
    """`path` itself, or, where it is missing and names a file of the rayfleet package (`rayfleet/train/configs/
    ddp.yaml`), that file wherever the package is installed: a checkout, a wheel, an image."""
    parts = path.parts
    if path.exists() or path.is_absolute() or len(parts) < 3 or parts[0] != "rayfleet":
        return path
    try:
        spec = importlib.util.find_spec(f"rayfleet.{parts[1]}")
    except (ImportError, ValueError):
        return path
    if spec is None or spec.origin is None:
        return path
    found = Path(spec.origin).parent.joinpath(*parts[2:])
    return found if found.is_file() else path


def load_config(cls: type[T], path: str | Path | None, overrides: list[str] | None = None) -> T:
    data: dict = {}
    if path is not None:
        path = packaged(Path(path))
        loaded = read_yaml_file(path, "config file") or {}
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
