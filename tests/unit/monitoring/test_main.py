"""`python -m monitoring --once`: one sample as JSON."""

from __future__ import annotations

import json

from monitoring.__main__ import main
from tests.fakes.fake_nvml import FakeNvml


def test_once_prints_one_sample_as_json(capsys, monkeypatch):
    monkeypatch.delenv("ECS_CONTAINER_METADATA_URI_V4", raising=False)
    monkeypatch.setenv("RAYFLEET_CLUSTER_NAME", "c1")
    assert main(["--once"], nvml=FakeNvml(gpus=2)) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["identity"]["cluster_name"] == "c1"
    assert [g["index"] for g in out["gpus"]] == [0, 1] and out["gpus"][1]["GPUUtilization"] == 20.0
