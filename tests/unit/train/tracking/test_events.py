from pathlib import Path

from rayfleet.core.run_dir import RunDir
from rayfleet.train.tracking.events import FOLDER, EventFiles, read_scalars


def test_scalars_are_read_back_by_tensorboards_own_reader(tmp_path):
    events = EventFiles(RunDir(str(tmp_path), "r"), purge_step=1)
    for step in (1, 2, 3):
        events.scalars(step, {"train/loss": 1.0 / step, "lr": 0.1})
    events.close()
    read = read_scalars(tmp_path / "r" / FOLDER)
    assert [s for s, _ in read["train/loss"]] == [1, 2, 3]
    assert [round(v, 6) for _, v in read["train/loss"]] == [1.0, 0.5, round(1 / 3, 6)]
    assert [round(v, 6) for _, v in read["lr"]] == [0.1, 0.1, 0.1]


def test_a_resumed_attempt_purges_the_steps_it_repeats(tmp_path):
    """Attempt 0 logs steps 1-5 and dies; attempt 1 resumes from the checkpoint of step 3 and logs 4-6:
    TensorBoard shows each step once, steps 4 and 5 with attempt 1's values."""
    run_dir = RunDir(str(tmp_path), "r")
    first = EventFiles(run_dir, purge_step=1)
    for step in range(1, 6):
        first.scalars(step, {"train/loss": 10.0 + step})
    first.close()
    second = EventFiles(run_dir, purge_step=4)
    for step in range(4, 7):
        second.scalars(step, {"train/loss": 20.0 + step})
    second.close()
    assert len(list((tmp_path / "r" / FOLDER).iterdir())) == 2  # one file per attempt
    read = read_scalars(tmp_path / "r" / FOLDER)
    assert read["train/loss"] == [(1, 11.0), (2, 12.0), (3, 13.0), (4, 24.0), (5, 25.0), (6, 26.0)]


def test_nothing_is_written_outside_the_run_directorys_folder(tmp_path: Path):
    events = EventFiles(RunDir(str(tmp_path), "r"), purge_step=None)
    events.scalars(1, {"x": 1.0})
    events.close()
    assert [p.relative_to(tmp_path).parts[:2] for p in tmp_path.rglob("*") if p.is_file()] == [("r", FOLDER)]
