"""The FSDP job's config checks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rayfleet.core.config import ConfigError, load_config
from rayfleet.train.fsdp.config import FSDPConfig
from tests.unit.recipes.helpers import REPO


def cfg(*overrides: str) -> FSDPConfig:
    return load_config(FSDPConfig, "rayfleet/train/configs/fsdp.yaml", list(overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["global_batch_size=30"], "global_batch_size: 30 cannot be split across 8 workers"),
        (["warmup_steps=200", "max_steps=100"], "warmup_steps: 200 must be below max_steps"),
        (["strategy=zero"], "strategy: Input should be 'fsdp' or 'deepspeed'"),
        (["seq_len=4"], "seq_len: Input should be greater than or equal to 8"),
        (["s3_endpoint_url=http://x"], "s3_endpoint_url: only meaningful with an s3:// storage"),
    ],
)
def test_config_rejections(overrides, message):
    with pytest.raises(ConfigError, match=message):
        cfg(*overrides)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tools import tiny_lm

    root = tmp_path_factory.mktemp("tiny")
    text = tiny_lm.corpus()
    (root / "corpus.txt").write_text(text)
    tiny_lm.build(root / "model", text)
    return root


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["model=/nowhere/no-such-model"], "model: /nowhere/no-such-model is not a directory"),
        (["seq_len=1024"], "seq_len: 1024 is above the model's maximum of 512 positions"),
        (["data=/nowhere/corpus.txt"], "data: /nowhere/corpus.txt does not exist"),
    ],
)
def test_the_driver_refuses_before_any_worker_starts(tiny_model, overrides, message):
    """The driver-side checks (rayfleet.train.fsdp.check_before_start) that the local-cluster test ran one job each
    for; the end-to-end refusal (exit 2, one line, nothing written) keeps one case there."""
    from rayfleet.train.fsdp import check_before_start

    base = [f"model={tiny_model / 'model'}", f"data={tiny_model / 'corpus.txt'}"]
    settings = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", [*base, *overrides])
    with pytest.raises(ConfigError, match=message):
        check_before_start(settings)
    assert check_before_start(load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", base)).is_dir()


def test_the_driver_refuses_bad_input_before_it_connects(tmp_path):
    """The job's command end to end: exit 2, the reason, no traceback, nothing written, and no Ray cluster
    asked for (none runs here: RAY_ADDRESS unset). The other checks are the cases above."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = ["--config", "rayfleet/train/configs/fsdp-tiny.yaml", f"model={tmp_path / 'model'}"]
    argv += [f"data={tmp_path / 'corpus.txt'}", f"storage={tmp_path}", "global_batch_size=7", "run_name=bad"]
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.train.fsdp", *argv],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-2000:]
    assert "global_batch_size: 7 cannot be split across 2 workers" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and not (tmp_path / "bad").exists()


def test_a_model_not_on_the_drivers_machine_is_left_to_the_ranks_and_a_rank_without_it_fails_in_one_line(
    tiny_model, tmp_path, monkeypatch, capsys
):
    """On ECS the driver (the trainer image) holds no weights: it checks what it can, says so, and hands the ranks
    the id; a rank whose node has the model neither preloaded nor reachable fails in one line naming the command
    that preloads it (the images tier shows the same two sides in the built images)."""
    from rayfleet.train import fsdp
    from rayfleet.train.models.hf import ModelNotFound

    monkeypatch.setenv("MODEL_DIR", str(tmp_path))  # an image whose $MODEL_DIR holds nothing
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = [f"data={tiny_model / 'corpus.txt'}", "model=nobody/no-such-model"]
    settings = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", base)
    assert fsdp.check_before_start(settings) is None
    assert capsys.readouterr().out == (
        "model: nobody/no-such-model is not on the driver's machine: each rank loads it on its own node (the worker "
        "image's $MODEL_DIR, which make build preloads for the groups with models; else the Hub)\n"
    )
    with pytest.raises(ModelNotFound):
        fsdp.run_loop({"config": settings, "run_name": "x", "model_dir": "nobody/no-such-model"}, None)
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: model: 'nobody/no-such-model' is neither a directory, nor under $MODEL_DIR")
    assert line.endswith(
        "make build push MODELS=nobody/no-such-model (then make deploy, for a worker group with models = true)"
    )


def test_a_rank_checks_the_models_positions_when_the_driver_could_not(tiny_model, capsys):
    """The driver without the model cannot compare seq_len with its positions: the ranks do, once they have it."""
    from rayfleet.train import fsdp

    base = [f"data={tiny_model / 'corpus.txt'}", f"model={tiny_model / 'model'}", "seq_len=1024"]
    settings = load_config(FSDPConfig, "rayfleet/train/configs/fsdp-tiny.yaml", base)
    with pytest.raises(ConfigError):
        fsdp.run_loop({"config": settings, "run_name": "x", "model_dir": str(tiny_model / "model")}, None)
    (line,) = capsys.readouterr().err.splitlines()
    assert line == "error: seq_len: 1024 is above the model's maximum of 512 positions"
