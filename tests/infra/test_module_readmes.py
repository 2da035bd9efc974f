"""Each module's README documents its inputs as variables.tf declares them: names, types, defaults, required.

The inputs table is the markdown table whose header starts with `input` and has `type`, `default`,
`required` and `description` columns, one row per variable. A default is written as JSON (`"10.42.0.0/16"`,
`30`, `false`, `[]`, `null`) or as a bare string; an empty cell shows no default. An object type is written
without its attributes (`map(object)`); the description cell says what they are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.infra.hcl import INFRA, MODULES, load_dir, merged

DIRS = [INFRA, *sorted(p for p in MODULES.iterdir() if p.is_dir())]
COLUMNS = ("input", "type", "default", "required", "description")
_NO_DEFAULT = object()


def hcl_type(raw: object) -> str:
    """A variable's type as the table writes it: `map(object({from = number, ...}))` -> `map(object)`."""
    text = str(raw).strip()
    if text.startswith("${") and text.endswith("}"):
        text = text[2:-1]
    text = re.sub(r'"\$\{[^{}]*\}"', "x", text)  # optional(string, "g5.xlarge") inside an object
    while True:
        shorter = re.sub(r"object\(\{[^{}]*\}\)", "object", text)
        if shorter == text:
            return re.sub(r"\s+", "", text)
        text = shorter


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def unquote(cell: str) -> str:
    return cell[1:-1] if len(cell) >= 2 and cell[0] == cell[-1] == "`" else cell


def inputs_table(readme: str) -> dict[str, dict[str, str]]:
    """name -> {column: cell} of the README's inputs table; {} when it has none."""
    lines = readme.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("|"):
            continue
        header = [c.lower() for c in cells(line)]
        if header and header[0] == "input":
            missing = [c for c in COLUMNS if c not in header]
            assert not missing, f"the inputs table lacks the columns {missing}"
            rows: dict[str, dict[str, str]] = {}
            for row in lines[i + 2 :]:
                if not row.lstrip().startswith("|"):
                    break
                values = dict(zip(header, cells(row), strict=False))
                name = unquote(values["input"])
                assert name not in rows, f"`{name}` has two rows"
                rows[name] = values
            return rows
    return {}


def shown_default(cell: str) -> object:
    cell = unquote(cell)
    if cell in ("", "-", "—"):
        return _NO_DEFAULT
    try:
        return json.loads(cell)
    except json.JSONDecodeError:
        return cell


def problems(variables: dict[str, dict], readme: str) -> list[str]:
    """Every way the README's inputs table disagrees with the variables; [] when they agree."""
    table = inputs_table(readme)
    if not table:
        return ["no inputs table (a header row starting `| input |`)"]
    found = [f"`{n}` is in variables.tf, not in the table" for n in sorted(set(variables) - set(table))]
    found += [f"`{n}` is in the table, not in variables.tf" for n in sorted(set(table) - set(variables))]
    for name in sorted(set(variables) & set(table)):
        body, row = variables[name], table[name]
        required = "default" not in body
        if row["required"].lower() not in ("yes", "no"):
            found.append(f"`{name}`: required is {row['required']!r}, not yes or no")
        elif (row["required"].lower() == "yes") != required:
            has = "no default" if required else f"default {body['default']!r}"
            found.append(f"`{name}`: the table says required {row['required']}, but variables.tf gives it {has}")
        shown = shown_default(row["default"])
        if shown is not _NO_DEFAULT:
            if required:
                found.append(f"`{name}`: the table shows default {row['default']} but it has none")
            elif shown != body["default"]:
                found.append(f"`{name}`: the table shows default {row['default']}, variables.tf {body['default']!r}")
        if re.sub(r"\s+", "", unquote(row["type"])) != hcl_type(body.get("type", "")):
            found.append(f"`{name}`: the table's type is {row['type']}, variables.tf {hcl_type(body.get('type'))}")
        if not row["description"]:
            found.append(f"`{name}`: no description")
    return found


def variables_of(path: Path) -> dict[str, dict]:
    return merged(load_dir(path), "variable")


@pytest.mark.parametrize("path", DIRS, ids=lambda p: "root" if p == INFRA else p.name)
def test_readme_inputs_table_matches_variables_tf(path: Path):
    found = problems(variables_of(path), (path / "README.md").read_text())
    assert not found, f"{path.relative_to(INFRA.parent)}/README.md:\n  " + "\n  ".join(found)


SAMPLE_TF = """
variable "name" {
  type = string
}

variable "keep_days" {
  type    = number
  default = 7
}

variable "ports" {
  type    = map(object({ from = number, to = number }))
  default = {}
}
"""

SAMPLE_README = """# sample

| input | type | default | required | description |
|---|---|---|---|---|
| `name` | `string` | | yes | name prefix |
| `keep_days` | `number` | `7` | no | days to keep |
| `ports` | `map(object)` | `{}` | no | name => `{from, to}` |

Outputs: none.
"""


def test_a_planted_mismatch_is_caught(tmp_path: Path):
    """The check is not vacuous: a matching table passes, and each kind of drift is reported."""
    (tmp_path / "variables.tf").write_text(SAMPLE_TF)
    variables = variables_of(tmp_path)
    assert problems(variables, SAMPLE_README) == []
    row = "| `keep_days` | `number` | `7` | no | days to keep |"
    drifts = {
        "default": row.replace("`7`", "`8`"),
        "required": row.replace("| no |", "| yes |"),
        "type": row.replace("`number`", "`string`"),
        "missing": "",
        "extra": row + "\n" + row.replace("keep_days", "retention_days"),
        "description": row.replace("days to keep |", " |"),
    }
    for kind, replacement in drifts.items():
        text = SAMPLE_README.replace(row + "\n", replacement + "\n" if replacement else "")
        assert text != SAMPLE_README, kind
        assert problems(variables, text), f"a changed {kind} went unnoticed"
    assert problems({**variables, "new_input": {"type": "string"}}, SAMPLE_README)
    assert problems(variables, SAMPLE_README.replace("| input |", "| name |")) == [
        "no inputs table (a header row starting `| input |`)"
    ]
