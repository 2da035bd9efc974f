"""The DDP run's classification endpoint: the job's own model, loading and input normalization."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import torch
from fastapi import Request
from fastapi.testclient import TestClient
from PIL import Image

from rayfleet.serve.classifier import ClassifyRequest, ImageClassifier
from rayfleet.serve.http import api_app, parse
from rayfleet.serve.keys import KeySource
from rayfleet.train import checkpoint
from rayfleet.train.data.device_batches import normalize
from rayfleet.train.ddp import Runtime, build_model
from rayfleet.train.ddp.config import DDPConfig

KEY = "c" * 24
AUTH = {"Authorization": f"Bearer {KEY}"}
CONFIG = "precision: fp32\nsmall_convs_as_gemm: auto\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint as the DDP job writes it, of a model with its own (random) weights."""
    torch.manual_seed(3)
    cfg = DDPConfig.model_construct(precision="fp32")
    model, _ = build_model(cfg, Runtime.resolve(cfg, torch.device("cpu")))
    folder = tmp_path_factory.mktemp("checkpoint_000002")
    checkpoint.write_state(folder, {"model": model.state_dict(), "epoch": 2})
    images = torch.randint(0, 256, (6, 28, 28), dtype=torch.uint8)
    with torch.no_grad():
        expected = torch.softmax(model.eval()(normalize(images.unsqueeze(1))), dim=1)
    return folder, images, expected


@pytest.fixture
def client(trained, monkeypatch):
    monkeypatch.setenv("RAYFLEET_SERVE_API_KEY", KEY)
    classifier = ImageClassifier(trained[0], CONFIG, "ddp-run")
    app = api_app(KeySource())

    @app.post("/v1/classify")
    async def classify(request: Request):
        return classifier.classify(await parse(request, ClassifyRequest))

    return TestClient(app)


def png(image: torch.Tensor, mode: str = "L") -> str:
    buffer = io.BytesIO()
    Image.fromarray(image.numpy()).convert(mode).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def test_pixels_and_png_are_classified_as_the_model_itself_does(trained, client):
    _, images, expected = trained
    by_pixels = client.post("/v1/classify", headers=AUTH, json={"images": images.tolist()})
    assert by_pixels.status_code == 200, by_pixels.text
    predictions = by_pixels.json()["predictions"]
    got = torch.tensor([p["probabilities"] for p in predictions])
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)
    assert [p["label"] for p in predictions] == expected.argmax(1).tolist()
    assert predictions[0]["class"] == by_pixels.json()["classes"][predictions[0]["label"]]
    by_png = client.post("/v1/classify", headers=AUTH, json={"png": [png(i, "RGB") for i in images]})
    assert by_png.json()["predictions"] == predictions


def test_bad_images_get_a_400_naming_the_problem(trained, client):
    images = trained[1]
    small = np.zeros((20, 20), dtype=np.uint8)
    cases = [
        ({"images": [[[0] * 28] * 27]}, "28x28"),
        ({"images": [[[300] * 28] * 28]}, "0-255"),
        ({"png": ["not base64 at all!"]}, "png[0]: not a base64"),
        ({"png": [png(torch.from_numpy(small))]}, "png[0]: must be 28x28"),
        ({"images": images.tolist(), "png": [png(images[0])]}, "exactly one"),
        ({"images": []}, "1 to 1024 images"),
        ({"pixels": []}, "pixels"),
    ]
    for body, words in cases:
        reply = client.post("/v1/classify", headers=AUTH, json=body)
        assert reply.status_code == 400, (body, reply.text)
        assert words in reply.json()["error"]["message"], reply.json()
    assert client.post("/v1/classify", json={"images": images[:1].tolist()}).status_code == 401
    assert client.post("/v1/classify", headers=AUTH, json={"images": images[:1].tolist()}).status_code == 200
