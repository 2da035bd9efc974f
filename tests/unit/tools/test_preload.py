"""The models image's preloading (images/ray-worker/preload.py, a build-time script that ships in no package):
copies a model directory and lists every file with its hash."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "images" / "ray-worker" / "preload.py"
_spec = importlib.util.spec_from_file_location("preload", SCRIPT)
preload = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(preload)


def test_a_local_model_is_copied_and_listed(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "gpt_neox"}')
    (src / "model.safetensors").write_bytes(b"\x00" * 1000)
    dest = tmp_path / "models"
    assert preload.main([f"tiny={src}", "--dest", str(dest)]) == 0
    manifest = json.loads((dest / "manifest.json").read_text())
    (model,) = manifest["models"]
    assert model["id"] == "tiny" and model["source"] == f"local:{src}"
    files = {f["name"]: f for f in model["files"]}
    assert files["model.safetensors"]["bytes"] == 1000
    assert files["model.safetensors"]["sha256"] == hashlib.sha256(b"\x00" * 1000).hexdigest()
    assert (dest / "tiny" / "config.json").is_file()


def test_a_directory_that_is_no_model_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="not a model directory"):
        preload.main([f"x={tmp_path}", "--dest", str(tmp_path / "out")])


def test_no_models_gives_an_empty_manifest(tmp_path):
    assert preload.main(["", "--dest", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "manifest.json").read_text())["models"] == []
