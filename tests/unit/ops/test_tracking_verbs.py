import json

import pytest

from rayfleet.core import ledger
from rayfleet.core.errors import ConfigError
from rayfleet.core.run_dir import RunDir
from rayfleet.ops.runs import ledger_plot, plot, tensorboard
from rayfleet.train.tracking.events import EventFiles


def make_run(root, name, epochs=2):
    rows = [
        {"epoch": e, "train_loss": 1.0 / e, "test_loss": 1.1 / e, "test_accuracy": 0.4 * e, "images_per_s": 9.0}
        for e in range(1, epochs + 1)
    ]
    RunDir(str(root), name).write("metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def test_plot_draws_several_runs_into_one_png(tmp_path, capsys):
    make_run(tmp_path, "a")
    make_run(tmp_path, "b", epochs=3)
    out = tmp_path / "both.png"
    assert plot.plot_runs(["a", "b"], str(tmp_path), out) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out == (
        f"wrote {out} (a: 2 points, b: 3 points)\nno goodput ledger for a, b (a run from before ledgers, or running)\n"
    )


def test_plot_draws_the_runs_goodput_ledgers_as_stacked_bars(tmp_path, capsys):
    """Each run's ledger (the one its driver wrote into its record) is a bar; a forged one is not drawn."""
    for name, compute in (("a", 60.0), ("b", 30.0), ("forged", 1.0)):
        make_run(tmp_path, name)
        sent = [{"seconds": {"compute": compute, "evaluation": 5.0}, "loop_began": 10.0, "reported": 95.0}]
        RunDir(str(tmp_path), name).send(ledger.LEDGER, ledger=ledger.build(0.0, 100.0, sent, 1.0))
    forged = RunDir(str(tmp_path), "forged")
    forged.send(ledger.LEDGER, ledger={"phases": [{"phase": "compute", "seconds": -5}]})
    out = tmp_path / "runs.png"
    assert plot.plot_runs(["a", "b", "forged"], str(tmp_path), out) == 0
    bars = tmp_path / "runs-ledger.png"
    assert bars.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    said = capsys.readouterr().out.splitlines()
    assert said[1:] == [
        f"wrote {bars} (the goodput ledger of a, b)",
        "no goodput ledger for forged (a run from before ledgers, or running)",
    ]
    assert ledger_plot.valid_seconds(RunDir(str(tmp_path), "a").record()["ledger"]) == {
        "run_start": 10.0,
        "compute": 60.0,
        "evaluation": 5.0,
        "teardown": 5.0,
        "unaccounted": 20.0,
    }


def test_plot_names_the_run_that_does_not_exist(tmp_path):
    make_run(tmp_path, "a")
    with pytest.raises(ConfigError, match=r"no such run \(no metrics.jsonl\): .*/nope \(rayfleet runs lists them\)"):
        plot.plot_runs(["a", "nope"], str(tmp_path))


def test_tensorboard_serves_each_runs_own_event_folder_on_localhost(tmp_path):
    for name in ("a", "b"):
        make_run(tmp_path, name)
        events = EventFiles(RunDir(str(tmp_path), name), purge_step=None)
        events.scalars(1, {"x": 1.0})
        events.close()
    folders = {name: tensorboard.local_events(RunDir(str(tmp_path), name)) for name in ("a", "b")}
    assert folders == {"a": tmp_path / "a" / "tensorboard", "b": tmp_path / "b" / "tensorboard"}
    cmd = tensorboard.command(folders, 6007)
    assert cmd[1:3] == ["-m", "tensorboard.main"]
    assert cmd[3:] == ["--logdir_spec", f"a:{folders['a']},b:{folders['b']}", "--host", "127.0.0.1", "--port", "6007"]


def test_tensorboard_refuses_a_run_without_events(tmp_path, capsys):
    make_run(tmp_path, "old")
    assert tensorboard.serve_tensorboard(["old"], str(tmp_path)) == 2
    assert "error: no TensorBoard events" in capsys.readouterr().err
