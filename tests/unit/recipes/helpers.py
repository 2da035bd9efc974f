"""Writing recipe files for the recipe tests."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, recipe: dict, files: dict[str, str] | None = None) -> Path:
    for name, text in (files if files is not None else {"train.py": "print('hi')\n"}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(recipe))
    return path


GOOD = {"name": "job", "entrypoint": "train.py"}
