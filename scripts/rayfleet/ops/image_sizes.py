"""Sizes the image build reports: of the models the trainer preloads (before the build) and of the built
images (after it, the upper bound of what a push uploads)."""

from __future__ import annotations

import subprocess
from pathlib import Path

FSDP_MODEL = "databricks/dolly-v2-7b"  # recipes/fsdp.yaml's model
# Rough download sizes of the Hub models the recipes use (their weights, fp16), for the build's summary; an
# id not listed is shown as "size unknown" rather than asking the Hub.
MODEL_BYTES = {FSDP_MODEL: 13.8e9}
# The Hub revision `make build` preloads each built-in recipe's model at (MODELS=org/name@<commit> pins
# another). dolly-v2-7b's: a commit of its repository as the Hub served it in a crawl
# (huggingface.co/databricks/dolly-v2-7b/resolve/<commit>/README.md, the Dolly v2 model card); whether a newer
# one exists could not be checked from where this was written (no network). The build records what it got.
REVISIONS = {FSDP_MODEL: "ca317e1c0e5fcb6ea0e508e586dc2bba44d628bd"}


def human(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def model_entries(models: str | None) -> list[str]:
    return [e.strip() for e in (models or "").split(",") if e.strip()]


def model_size(entry: str) -> float | None:
    """Bytes of a name=/dir entry (its files) or a catalogued Hub id; None when not known."""
    if "=" not in entry:
        return MODEL_BYTES.get(entry.partition("@")[0])  # org/name@<commit>: the same weights
    path = Path(entry.split("=", 1)[1])
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else None


def image_size(tool: str, name: str, run=None) -> int | None:
    """The engine's `image inspect` Size: bytes, uncompressed; None when it does not answer."""
    result = (run or subprocess.run)(
        [tool, "image", "inspect", "--format", "{{.Size}}", name], capture_output=True, text=True
    )
    try:
        return int(result.stdout.strip()) if result.returncode == 0 else None
    except ValueError:
        return None


def size_report(tool: str, names: list[str], run=None) -> list[str]:
    """Each built image's size, and the total `make push` uploads for them."""
    if not names:
        return []
    sizes = {name: image_size(tool, name, run) for name in names}
    width = max(len(n) for n in names)
    lines = [f"  {n:<{width}}  {'size unknown' if b is None else human(b)}" for n, b in sizes.items()]
    total = sum(b for b in sizes.values() if b is not None)
    unknown = " and the images of unknown size" if None in sizes.values() else ""
    # ECR stores layers compressed and skips those a repository already has: an upper bound, not a forecast.
    return [
        "image sizes:",
        *lines,
        f"rayfleet images push uploads {len(names)} image(s): at most {human(total)}{unknown} (uncompressed sizes)",
    ]
