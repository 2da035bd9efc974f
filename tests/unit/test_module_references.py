"""Nothing points at a module or a file that does not exist: every dotted module of rayfleet or tools and
every `rayfleet/...`, `scripts/rayfleet/...`, `training/rayfleet/...`, `tools/...` path named in code, docs,
recipes, images, Terraform and the Makefile is there (a bare `rayfleet/...` path is a module's path in its
source root, scripts/ or training/); the old package names (`scripts.`, `training.` as packages) are gone."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TEXT = (
    ".py",
    ".md",
    ".tf",
    ".tftpl",
    ".hcl",
    ".yaml",
    ".yml",
    ".toml",
    ".sh",
    ".txt",
    ".json",
    "Dockerfile",
    "Makefile",
)
MODULE = re.compile(r"(?<![\w./-])((?:rayfleet|tools)(?:\.[a-z_][a-z0-9_]*)+)")
PATH = re.compile(r"(?<![\w./:-])((?:(?:scripts|training)/)?(?:rayfleet|tools)/[\w./-]*[\w/])")
SOURCE_ROOTS = ("scripts", "training")  # the two portions of the rayfleet namespace
# Secrets Manager names under the deployment's prefix (rayfleet/ray-auth-token, rayfleet/recipes/hf-token) are
# not paths; a path names a folder of the package, and so does every check below.
PACKAGE_FOLDERS = (
    "rayfleet/cli",
    "rayfleet/ops",
    "rayfleet/targets",
    "rayfleet/ecs",
    "rayfleet/local",
    "rayfleet/node",
    "rayfleet/recipes",
    "rayfleet/serve",
    "rayfleet/train",
    "rayfleet/core",
    "tools/rehearsal",
    "tools/terraform_standin",
    "tools/rendered",
    "tools/moto",
)
OLD_PACKAGES = "core|container|recipes|ecs|deploy|serving|ddp|fsdp|configs"
OLD = re.compile(rf"(?<![\w./-])(?:python -m (?:scripts|training)\b|(?:scripts|training)\.(?:{OLD_PACKAGES})\b)")
# Names that look like modules but are not: labels, tags, DNS names, the plan file.
NOT_MODULES = {
    "rayfleet.egg",
    "tools.parent",
    "rayfleet.rehearsal",
    "rayfleet.task",
    "rayfleet.container",
    "rayfleet.run_dir",
    "rayfleet.internal",
    "rayfleet.io",  # the prefix of the worker-group Ray label (core/worker_groups.py)
    "rayfleet.tfplan",
    "rayfleet.rayfleet",
}


def files() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return [
        REPO / f for f in out.split() if f.endswith(TEXT) or Path(f).name.endswith(TEXT) or f.startswith("images/bin/")
    ]


def where(path: str) -> list[Path]:
    """Where a repository path may be: itself, or for a bare `rayfleet/...` path, in either source root."""
    if path.startswith("rayfleet/"):
        return [REPO / root / path for root in SOURCE_ROOTS]
    return [REPO / path]


def module_exists(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 1, -1):  # a module, or an attribute of one (rayfleet.cli.main:run)
        for base in where("/".join(parts[:i])):
            if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
                return True
    return False


def test_every_named_module_and_path_exists():
    missing = []
    for path in files():
        text = path.read_text(errors="replace")
        rel = path.relative_to(REPO)
        for name in set(MODULE.findall(text)) - NOT_MODULES - {"rayfleet.__path__"}:
            name = name.rstrip(".")
            if name.endswith((".py", ".yaml", ".json", ".md")):
                continue
            if not module_exists(name):
                missing.append(f"{rel}: module {name}")
        for name in set(PATH.findall(text)):
            bare = name.split("*")[0].rstrip("/")
            looks_like_a_file = "." in bare.rsplit("/", 1)[-1] or name.endswith("/")  # not a secret's name
            in_root = bare.split("/", 1)[0] in SOURCE_ROOTS
            inner = bare.split("/", 1)[1] if in_root else bare
            in_package = any(inner == f or inner.startswith((f + "/", f + ".")) for f in PACKAGE_FOLDERS)
            if in_package and looks_like_a_file and "*" not in name and not any(p.exists() for p in where(bare)):
                missing.append(f"{rel}: path {name}")
    assert not missing, "\n".join(sorted(missing))


def test_the_old_package_names_are_gone():
    stale = []
    for path in files():
        for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OLD.search(line) and path.name != Path(__file__).name:
                stale.append(f"{path.relative_to(REPO)}:{i}: {line.strip()[:100]}")
    assert not stale, "\n".join(stale)


def test_the_console_scripts_resolve():
    import tomllib

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"rayfleet", "rayfleet-node"}
    for target in scripts.values():
        module, func = target.split(":")
        assert importlib.util.find_spec(module) is not None, module
        assert callable(getattr(importlib.import_module(module), func))
