"""Package a recipe's code directory as the zip Ray's Jobs API unpacks as the job's working directory.

The zip is reproducible: files in sorted order, fixed timestamps and modes, so the same tree always has the
same sha256, which names the object in S3 and is recorded with the run. Left out: version control, caches,
virtual environments, what the project's .gitignore ignores when the code directory is in a git work tree
(git itself lists the files), what the recipe's `exclude` names (as in .gitignore: `/data` is the top-level
directory only, `data` and `*.ckpt` match at any depth), and files that look like state or keys
(`*.tfstate`, `.env`, `*.pem`, `id_*`...), which `left_out` names so the caller can say so. A link that
leads out of the code directory is refused: the job would ship whatever it points at. Ray refuses working
directories over 500 MiB; this says so before anything is uploaded.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import subprocess
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

ALWAYS_EXCLUDED = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    "*.pyc",
    ".venv",
    ".venv-*",
    "venv",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "node_modules",
    ".terraform",
    ".rayfleet",
    ".DS_Store",
)
# State and keys: never shipped by default (a recipe that really needs one reads it from a secret).
SENSITIVE = (
    "*.tfstate",
    "*.tfstate.*",
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".pgpass",
    "credentials",
    "*.tfvars",
    "*.tfvars.json",
    ".pypirc",
    ".npmrc",
    ".git-credentials",
    "kubeconfig",
    "*.kubeconfig",
)
# The same, as a file in a tool's own folder: any depth, the name alone being too common ("config").
SENSITIVE_PATHS = (".kube/config", ".aws/config", ".docker/config.json")
MAX_BYTES = 500 * 1024**2
FIXED_TIME = (2020, 1, 1, 0, 0, 0)


class PackageError(ValueError):
    pass


@dataclass(frozen=True)
class CodePackage:
    path: Path
    sha256: str
    files: int
    bytes: int  # uncompressed
    left_out: list[str] = field(default_factory=list)  # files that look like state or keys


def _excluded(rel: str, patterns: tuple[str, ...]) -> bool:
    """As in .gitignore: `/data` is the top-level data only; `data` or `*.ckpt` match at any depth."""
    parts = rel.split("/")
    for pattern in patterns:
        if pattern.startswith("/"):
            if fnmatch.fnmatch(rel, pattern[1:]):
                return True
        elif fnmatch.fnmatch(rel, pattern) or any(fnmatch.fnmatch(part, pattern) for part in parts):
            return True
    return False


def looks_sensitive(rel: str, where: Path | None = None) -> bool:
    """State or keys by name (SENSITIVE, SENSITIVE_PATHS): left out of the code package and of staged data.
    `where`: the file's absolute path, so a tool's folder named as the code or data folder itself (`data:
    ~/.kube`, whose file is just `config`) is seen too."""
    places = [rel] + ([where.as_posix()] if where is not None else [])
    return _excluded(rel, SENSITIVE) or any(s == p or s.endswith("/" + p) for s in places for p in SENSITIVE_PATHS)


def _git_files(code_dir: Path) -> set[str] | None:
    """What git would ship from a work tree (tracked + untracked, minus .gitignore), relative to code_dir;
    None when code_dir is not in a git work tree."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(code_dir), "ls-files", "--cached", "--others", "--exclude-standard", "-z", "."],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return None
    return {name for name in listed.decode().split("\0") if name}


def _check_link(code_dir: Path, path: Path) -> None:
    target = path.resolve()
    if not target.is_relative_to(code_dir):
        rel = path.relative_to(code_dir).as_posix()
        raise PackageError(f"code: {rel} is a link to {target}, outside {code_dir}; copy it in, or exclude it")


def walk(code_dir: Path, exclude: list[str] | tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    """(files to ship, files left out because they look like state or keys), both sorted."""
    patterns = (*ALWAYS_EXCLUDED, *exclude)
    tracked = _git_files(code_dir)
    found, secret = [], []
    for root, dirs, names in os.walk(code_dir):
        rel_root = Path(root).relative_to(code_dir).as_posix()
        rel_root = "" if rel_root == "." else rel_root + "/"
        for name in [*dirs, *names]:
            if (Path(root) / name).is_symlink() and not _excluded(rel_root + name, patterns):
                _check_link(code_dir, Path(root) / name)
        dirs[:] = sorted(d for d in dirs if not _excluded(rel_root + d, patterns))
        for name in names:
            rel = rel_root + name
            if _excluded(rel, patterns) or not (Path(root) / name).is_file():
                continue
            if tracked is not None and rel not in tracked:
                continue  # ignored by the project's .gitignore
            (secret if looks_sensitive(rel, Path(root, name).resolve()) else found).append(rel)
    return sorted(found), sorted(secret)


def files_of(code_dir: Path, exclude: list[str] | tuple[str, ...] = ()) -> list[str]:
    return walk(code_dir.resolve(), exclude)[0]


def package(code_dir: Path, dest: Path, exclude: list[str] | tuple[str, ...] = ()) -> CodePackage:
    code_dir = code_dir.resolve()
    names, left_out = walk(code_dir, exclude)
    if not names:
        raise PackageError(f"code: {code_dir} has no files to ship (after excluding {', '.join(exclude) or 'caches'})")
    total = sum((code_dir / n).stat().st_size for n in names)
    if total > MAX_BYTES:
        biggest = sorted(names, key=lambda n: (code_dir / n).stat().st_size, reverse=True)[:3]
        raise PackageError(
            f"code: {code_dir} is {total / 1024**2:.0f} MiB, over Ray's 500 MiB for a working directory; "
            f"put data in storage and exclude it (largest: {', '.join(biggest)})"
        )
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for name in names:
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            mode = 0o755 if os.access(code_dir / name, os.X_OK) else 0o644
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, (code_dir / name).read_bytes())
    return CodePackage(dest, sha256_of(dest), len(names), total, left_out)


def sha256_of(path: Path) -> str:
    """The zip's identity: its name in S3, its record, and what the trainer checks before running it."""
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
