"""When a checkpoint folder is complete: the contract between the ranks that write it, the ranks that resume
from it, serving (which picks the latest complete one) and whatever lists a run's checkpoints.

Every rank that writes files into a checkpoint puts its seal in LAST, beside them, in the folder it hands to
Ray Train: `rayfleet-complete.<rank>.json`, holding

    {"rank": 0, "writers": 2, "files": {"state.pt": 1234, "sub/part.bin": 99}}

(`writers`: how many ranks write into this checkpoint, so seals 0..writers-1 must all be there; the DDP job
writes from rank 0 alone, FSDP and DeepSpeed from every rank; `files`: every file that rank wrote, by path
inside the folder, with its size in bytes). A checkpoint is complete when every writer's seal is there, they
agree on `writers`, and every file they list is there with its size. Ray Train merges the ranks' folders
into one, so the seals of all ranks sit side by side.

A folder with no seal at all was written before this contract (or by something else): it is accepted as long
as it holds the reader's `required` files (`legacy`: the reader says so once), since a seal cannot exist
there; an EMPTY folder never is (S3 has no folders: a checkpoint whose objects were deleted downloads empty).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "rayfleet-complete."
SEAL = re.compile(r"rayfleet-complete\.(\d+)\.json")


def seal_name(rank: int) -> str:
    return f"{PREFIX}{rank}.json"


@dataclass(frozen=True)
class Verdict:
    complete: bool
    why: str = ""  # what is wrong (incomplete), or a note (legacy)
    legacy: bool = False  # complete as far as can be told: written before seals existed


def seal(directory: Path, rank: int, writers: int) -> Path:
    """Seal what this rank wrote into `directory` (call it after the last file): every file but seals."""
    files = {
        path.relative_to(directory).as_posix(): path.stat().st_size
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not SEAL.fullmatch(path.name)
    }
    body = json.dumps({"rank": rank, "writers": writers, "files": files}, sort_keys=True)
    target = directory / seal_name(rank)
    partial = directory / f".{target.name}.partial"  # never under the seal's name until whole
    partial.write_text(body)
    os.replace(partial, target)
    return target


def judge(files: Mapping[str, int], read: Callable[[str], str], required: Iterable[str] = ()) -> Verdict:
    """The verdict on one checkpoint folder from its files (path inside it -> size) and a reader of its
    seals' text (by name)."""
    seals = sorted((int(m.group(1)), name) for name in files if (m := SEAL.fullmatch(name)))
    if not seals:
        if not [name for name in files if not name.startswith(".")]:
            return Verdict(False, "it holds no files")
        missing = [name for name in required if name not in files]
        if missing:
            return Verdict(False, f"it has no {missing[0]} and no completeness seal")
        return Verdict(True, "it has no completeness seal (written before rayfleet sealed checkpoints)", True)
    listed: dict[str, int] = {}
    writers = set()
    for rank, name in seals:
        try:
            body = json.loads(read(name))
            if int(body["rank"]) != rank:
                raise ValueError(f"it names rank {body['rank']}")
            writers.add(int(body["writers"]))
            listed.update({str(k): int(v) for k, v in body["files"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return Verdict(False, f"its seal {name} is unreadable ({type(exc).__name__})")
    if len(writers) != 1:
        return Verdict(False, f"its seals disagree on how many ranks wrote it ({sorted(writers)})")
    (count,) = writers
    absent = sorted(set(range(count)) - {rank for rank, _ in seals})
    if absent:
        return Verdict(False, f"rank {absent[0]} of {count} did not finish writing it (no {seal_name(absent[0])})")
    for name, size in sorted(listed.items()):
        if name not in files:
            return Verdict(False, f"{name} is missing")
        if files[name] != size:
            return Verdict(False, f"{name} is {files[name]} bytes, written as {size}")
    return Verdict(True)


def check_directory(directory: Path, required: Iterable[str] = ()) -> Verdict:
    """The verdict on a local checkpoint folder."""
    if not directory.is_dir():
        return Verdict(False, "it does not exist")
    files = {p.relative_to(directory).as_posix(): p.stat().st_size for p in directory.rglob("*") if p.is_file()}
    return judge(files, lambda name: (directory / name).read_text(), required)


def check_filesystem(filesystem, path: str, required: Iterable[str] = ()) -> Verdict:
    """The verdict on a checkpoint folder in run storage, read where it lies (a pyarrow filesystem: local or
    S3), without copying it: what serving and listings use."""
    from pyarrow import fs as pafs

    infos = filesystem.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=True))
    files = {info.path[len(path.rstrip("/")) + 1 :]: info.size for info in infos if info.type == pafs.FileType.File}

    def read(name: str) -> str:
        with filesystem.open_input_stream(f"{path.rstrip('/')}/{name}") as stream:
            return stream.read().decode()

    return judge(files, read, required)
