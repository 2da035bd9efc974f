"""Where a Hugging Face model is found: a path or the preloaded $MODEL_DIR."""

from __future__ import annotations

import pytest


def test_model_dir_from_a_path_or_the_preloaded_model_dir(tmp_path, monkeypatch):
    from rayfleet.train.models.hf import ModelNotFound, resolve_model_dir

    preloaded = tmp_path / "models" / "databricks" / "dolly-v2-7b"
    preloaded.mkdir(parents=True)
    monkeypatch.setenv("MODEL_DIR", str(tmp_path / "models"))
    assert resolve_model_dir("databricks/dolly-v2-7b") == preloaded  # the trainer image's /models
    assert resolve_model_dir(str(preloaded)) == preloaded
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFound, match="neither a directory, nor under \\$MODEL_DIR"):
        resolve_model_dir("nobody/no-such-model")
