"""The checkpoint completeness contract (rayfleet/core/checkpoint_seal.py): which folders are complete."""

from __future__ import annotations

import pytest

from rayfleet.core.checkpoint_seal import Verdict, check_directory, check_filesystem, seal


def _ranks(folder, writers: int, sealed=None):
    """`writers` ranks each write a file of their own and seal it (as Ray Train merges their folders)."""
    for rank in range(writers):
        own = folder.parent / f"rank{rank}"
        own.mkdir(parents=True)
        (own / f"__{rank}_0.distcp").write_bytes(b"x" * (rank + 3))
        if sealed is None or rank in sealed:
            seal(own, rank, writers)
        for file in own.iterdir():
            folder.mkdir(exist_ok=True)
            file.rename(folder / file.name)


def test_every_writers_seal_and_every_listed_file_make_a_complete_checkpoint(tmp_path):
    folder = tmp_path / "checkpoint_step_0000002"
    _ranks(folder, 2)
    assert check_directory(folder) == Verdict(True)
    (folder / "__1_0.distcp").write_bytes(b"x")
    assert check_directory(folder) == Verdict(False, "__1_0.distcp is 1 bytes, written as 4")
    (folder / "__1_0.distcp").unlink()
    assert check_directory(folder) == Verdict(False, "__1_0.distcp is missing")


def test_a_rank_that_did_not_finish_leaves_the_checkpoint_incomplete(tmp_path):
    folder = tmp_path / "checkpoint_step_0000002"
    _ranks(folder, 2, sealed={0})
    assert check_directory(folder) == Verdict(
        False, "rank 1 of 2 did not finish writing it (no rayfleet-complete.1.json)"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('{"rank": 0, "writers": 2', "its seal rayfleet-complete.0.json is unreadable (JSONDecodeError)"),
        ('{"rank": 1, "writers": 1, "files": {}}', "its seal rayfleet-complete.0.json is unreadable (ValueError)"),
        ('{"rank": 0, "writers": 3, "files": {}}', "its seals disagree on how many ranks wrote it ([2, 3])"),
    ],
)
def test_a_seal_that_does_not_read_as_written_is_incomplete(tmp_path, text, why):
    folder = tmp_path / "checkpoint_step_0000002"
    _ranks(folder, 2)
    (folder / "rayfleet-complete.0.json").write_text(text)
    assert check_directory(folder) == Verdict(False, why)


def test_an_unsealed_folder_is_read_as_is_only_when_it_holds_what_the_reader_needs(tmp_path):
    folder = tmp_path / "checkpoint_000001"
    folder.mkdir()
    assert check_directory(folder, ["state.pt"]) == Verdict(False, "it holds no files")
    (folder / ".is_checkpoint").write_text("")  # a hidden file alone is no checkpoint either
    assert check_directory(folder, ["state.pt"]) == Verdict(False, "it holds no files")
    (folder / "other.bin").write_text("x")
    assert check_directory(folder, ["state.pt"]) == Verdict(False, "it has no state.pt and no completeness seal")
    (folder / "state.pt").write_text("x")
    verdict = check_directory(folder, ["state.pt"])
    assert verdict.complete and verdict.legacy
    assert check_directory(tmp_path / "gone") == Verdict(False, "it does not exist")


def test_run_storage_is_judged_where_it_lies(tmp_path):
    from pyarrow import fs

    folder = tmp_path / "run" / "checkpoint_step_0000002"
    _ranks(folder, 2)
    storage = fs.SubTreeFileSystem(str(tmp_path), fs.LocalFileSystem())
    assert check_filesystem(storage, "run/checkpoint_step_0000002") == Verdict(True)
    (folder / "__0_0.distcp").unlink()
    assert check_filesystem(storage, "run/checkpoint_step_0000002") == Verdict(False, "__0_0.distcp is missing")
    assert check_filesystem(storage, "run/checkpoint_step_0000009") == Verdict(False, "it holds no files")
