"""Package a recipe's code directory as the zip Ray's Jobs API unpacks as the job's working directory.

The zip is reproducible: files in sorted order, fixed timestamps and modes, so the same tree always has the
same sha256, which names the object in S3 and is recorded with the run. Left out: version control, caches,
virtual environments, and what the recipe's `exclude` names (as in .gitignore: `/data` is the top-level
directory only, `data` and `*.ckpt` match at any depth). Ray refuses working directories over 500 MiB;
this says so before anything is uploaded.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

ALWAYS_EXCLUDED = (".git", ".hg", ".svn", "__pycache__", "*.pyc", ".venv", ".venv-*", "venv", ".mypy_cache",
                   ".pytest_cache", ".ruff_cache", "node_modules", ".terraform", ".rayfleet", ".DS_Store")  # fmt: skip
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


def files_of(code_dir: Path, exclude: list[str] | tuple[str, ...] = ()) -> list[str]:
    patterns = (*ALWAYS_EXCLUDED, *exclude)
    found = []
    for root, dirs, names in os.walk(code_dir):
        rel_root = Path(root).relative_to(code_dir).as_posix()
        rel_root = "" if rel_root == "." else rel_root + "/"
        dirs[:] = sorted(d for d in dirs if not _excluded(rel_root + d, patterns))
        found += [rel_root + n for n in names if not _excluded(rel_root + n, patterns)
                  and (Path(root) / n).is_file()]  # fmt: skip
    return sorted(found)


def package(code_dir: Path, dest: Path, exclude: list[str] | tuple[str, ...] = ()) -> CodePackage:
    code_dir = code_dir.resolve()
    names = files_of(code_dir, exclude)
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
    digest = hashlib.sha256(dest.read_bytes()).hexdigest()
    return CodePackage(dest, digest, len(names), total)
