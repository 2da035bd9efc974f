"""/v1/classify for a DDP run: 28x28 grayscale images in, FashionMNIST class probabilities out.

The model is built, loaded and fed exactly as the job evaluates: the job's own `build_model` and `Runtime`
(from the run's config.yaml and this replica's device) and the same `normalize` of the uint8 pixels.
"""

from __future__ import annotations

import base64
import binascii
import io
import threading
from pathlib import Path

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from rayfleet.core.checkpoint_seal import check_directory
from rayfleet.core.config import load_yaml
from rayfleet.core.errors import RayfleetError
from rayfleet.serve.http import RequestError
from rayfleet.train import checkpoint
from rayfleet.train.data.device_batches import normalize
from rayfleet.train.data.fashion_mnist import CLASS_NAMES
from rayfleet.train.ddp import Runtime, build_model
from rayfleet.train.ddp.config import DDPConfig

SIDE = 28
MAX_IMAGES = 1024  # about 3 MB of JSON


class ClassifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    images: list[list[list[int]]] | None = Field(None, description="N images, 28 rows of 28 pixels 0-255")
    png: list[str] | None = Field(None, description="N base64 PNG files, 28x28 (grayscale or converted to it)")

    @model_validator(mode="after")
    def _one_source(self) -> ClassifyRequest:
        if (self.images is None) == (self.png is None):
            raise ValueError("send images (pixel arrays) or png (base64 files): exactly one of them")
        count = len(self.images if self.images is not None else self.png)
        if not 1 <= count <= MAX_IMAGES:
            raise ValueError(f"1 to {MAX_IMAGES} images per request, got {count}")
        return self


def pixels(req: ClassifyRequest) -> torch.Tensor:
    """uint8 [N, 28, 28], or a 400 that says which image is wrong."""
    if req.images is not None:
        try:
            x = torch.tensor(req.images, dtype=torch.int64)
        except (ValueError, TypeError):
            raise RequestError(400, f"images: every image must be {SIDE} rows of {SIDE} pixels") from None
        if x.dim() != 3 or tuple(x.shape[1:]) != (SIDE, SIDE):
            raise RequestError(400, f"images: every image must be {SIDE}x{SIDE}, got shape {list(x.shape)}")
        if x.min() < 0 or x.max() > 255:
            raise RequestError(400, "images: pixels must be 0-255")
        return x.to(torch.uint8)
    return torch.stack([_png(i, text) for i, text in enumerate(req.png)])


def _png(index: int, text: str) -> torch.Tensor:
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(base64.b64decode(text, validate=True))).convert("L")
    except (binascii.Error, UnidentifiedImageError, OSError):
        raise RequestError(400, f"png[{index}]: not a base64-encoded image file") from None
    if image.size != (SIDE, SIDE):
        raise RequestError(400, f"png[{index}]: must be {SIDE}x{SIDE} pixels, got {image.size[0]}x{image.size[1]}")
    return torch.from_numpy(np.asarray(image, dtype=np.uint8).copy())


class ImageClassifier:
    def __init__(self, checkpoint_dir: Path, config_yaml: str, model_id: str):
        # Validated when the job ran; validating again would check a data_dir this node need not have.
        cfg = DDPConfig.model_construct(**(load_yaml(config_yaml) or {}))
        self.model_id = model_id
        self.rt = Runtime.resolve(cfg, torch.device("cuda" if torch.cuda.is_available() else "cpu"))
        self.model, _ = build_model(cfg, self.rt)
        # The copy this replica made is checked, not only the folder `find` chose: files can go in between.
        sealed = check_directory(Path(checkpoint_dir), [checkpoint.STATE_FILE])
        if not sealed.complete:
            raise RayfleetError(f"refusing to serve {Path(checkpoint_dir).name}: it is incomplete ({sealed.why})")
        self.model.load_state_dict(checkpoint.read_state(checkpoint_dir)["model"])
        self.model.eval()
        self.lock = threading.Lock()

    @torch.no_grad()
    def classify(self, req: ClassifyRequest) -> dict:
        x = normalize(pixels(req).unsqueeze(1).to(self.rt.device))
        if self.rt.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        with self.lock, self.rt.autocast():
            logits = self.model(x)
        probabilities = torch.softmax(logits.float(), dim=1).cpu()
        labels = probabilities.argmax(1).tolist()
        return {
            "model": self.model_id,
            "classes": list(CLASS_NAMES),
            "predictions": [
                {"label": label, "class": CLASS_NAMES[label], "probabilities": probs}
                for label, probs in zip(labels, probabilities.tolist(), strict=True)
            ],
        }
