"""Read rayfleet's Terraform with python-hcl2 and evaluate its simple arithmetic locals.

Terraform providers cannot be downloaded on the machines that run these tests, so there is no plan to
inspect. What a plan would compute for task sizes and GPU counts is evaluated here instead: the sizing
locals are plain arithmetic over `var.*` and `local.*` with floor/min/max, which is also Python syntax, and
map for expressions of such arithmetic (`{for g, w in var.worker_groups : g => floor(w.memory_mib * 0.9)}`, one
per worker group). Anything else (conditionals, other for expressions) raises rather than guessing.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import hcl2

INFRA = Path(__file__).resolve().parents[2] / "infra"
MODULES = INFRA / "modules"
_SIMPLE = re.compile(r"^[\w\s.+\-*/()\[\]\"',<>=!&|]+$")
# {for KEY, VALUE in MAP : KEY => BODY} or {for KEY in LIST : KEY => BODY}, as hcl2 keeps it (without the ${ })
_FOR = re.compile(r"^\{for (\w+)(?:\s*,\s*(\w+))? in (.+?) : (\w+) => (.+)\}$", re.S)


def load_dir(path: Path) -> dict[str, list]:
    """Every top-level block of every .tf file in a directory, merged by block type."""
    merged: dict[str, list] = {}
    for tf in sorted(path.glob("*.tf")):
        with tf.open() as handle:
            for kind, blocks in hcl2.load(handle).items():
                merged.setdefault(kind, []).extend(blocks)
    return merged


def resources(blocks: dict, kind: str) -> dict[str, dict]:
    """name -> body of every resource of one type."""
    found: dict[str, dict] = {}
    for block in blocks.get("resource", []):
        for body in block.get(kind, {}).items() if kind in block else ():
            found[body[0]] = body[1]
    return found


def merged(blocks: dict, kind: str) -> dict:
    """All `locals`, `variable`, `output` or `module` blocks merged into one name -> body mapping."""
    result: dict = {}
    for block in blocks.get(kind, []):
        result.update(block)
    return result


def strip(expr: str) -> str:
    expr = expr.strip()
    if expr.startswith("${") and expr.endswith("}"):
        return expr[2:-1]
    return expr


class Namespace:
    """Attribute and key access over a mapping, so `var.node.memory_mib` and `var.images["x"]` evaluate."""

    def __init__(self, values: dict):
        self._values = values

    def __getattr__(self, name: str):
        try:
            return wrap(self._values[name])
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        return wrap(self._values[key])


def wrap(value):
    return Namespace(value) if isinstance(value, dict) else value


def unwrap(value):
    return value._values if isinstance(value, Namespace) else value


class Evaluator:
    """Evaluates a module's locals given its input variables."""

    def __init__(self, locals_: dict, variables: dict):
        self.locals_ = locals_
        self.variables = variables
        self.cache: dict[str, object] = {}
        evaluator = self

        class Locals:
            def __getattr__(self, name: str):
                return wrap(evaluator.local(name))

        self.names = {
            "var": Namespace(variables),
            "local": Locals(),
            "floor": math.floor,
            "ceil": math.ceil,
            "min": min,
            "max": max,
            "tostring": lambda v: str(v),
            "keys": lambda m: list(unwrap(m)),
        }

    def local(self, name: str):
        if name not in self.cache:
            self.cache[name] = self.value(self.locals_[name])
        return self.cache[name]

    def value(self, raw, scope: dict | None = None):
        """A raw hcl2 value evaluated; scope: names bound besides var and local (a for expression's, each)."""
        if isinstance(raw, dict):
            return {k: self.value(v, scope) for k, v in raw.items()}
        if isinstance(raw, list):
            return [self.value(v, scope) for v in raw]
        if not isinstance(raw, str) or "${" not in raw:
            return raw
        return self.expression(strip(raw), scope)

    def expression(self, expr: str, scope: dict | None = None):
        loop = _FOR.match(expr.strip())
        if loop:
            return self._for(*loop.groups(), scope or {})
        python = expr.replace("&&", " and ").replace("||", " or ")
        if not _SIMPLE.match(python) or "?" in python or " for " in f" {python} ":
            raise ValueError(f"not a simple arithmetic expression: {expr}")
        return eval(python, {"__builtins__": {}}, {**self.names, **scope} if scope else self.names)  # our own Terraform

    def _for(self, key_name: str, value_name: str | None, collection: str, key: str, body: str, scope: dict) -> dict:
        """A map for expression: one entry per key of a map (KEY, VALUE) or per element of a list (KEY)."""
        if key != key_name:
            raise ValueError(f"not a simple for expression: its key is {key}, not {key_name}")
        items = unwrap(self.expression(collection, scope))
        pairs = items.items() if value_name else ((k, None) for k in items)
        result = {}
        for k, v in pairs:
            inner = {**scope, key_name: k, **({value_name: wrap(v)} if value_name else {})}
            # an object body ({"memory": "${...}", ...}) is JSON whose values are expressions
            result[k] = self.value(json.loads(body), inner) if body.startswith("{") else self.expression(body, inner)
        return result
