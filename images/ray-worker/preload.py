"""Preload models into an image at build time and list them, file by file, in a manifest.

    python preload.py --dest /models databricks/dolly-v2-7b
    python preload.py --dest /models tiny-gpt-neox=/mnt/models-src/tiny-gpt-neox,EleutherAI/pythia-70m

An entry is a Hugging Face Hub id, `org/name` or `org/name@<commit>` for that revision (snapshot_download at the
commit the Hub resolves, recorded; `HF_TOKEN` for gated models), or `name=/path` for a directory mounted into
the build. Each lands in <dest>/<name> (what `$MODEL_DIR/<id>` lookups expect);
<dest>/manifest.json records source, revision, and every file's size and SHA-256. Standalone on purpose:
it runs in the image's build stage before the training code is copied in.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

WEIGHTS_ONLY = ["*.json", "*.safetensors", "*.model", "*.txt", "tokenizer*"]  # no duplicate .bin/.h5 weights


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch(entry: str, dest: Path) -> dict:
    if "=" in entry:
        name, source = entry.split("=", 1)
        src = Path(source)
        if not (src / "config.json").is_file():
            raise SystemExit(f"preload: {src} is not a model directory (no config.json)")
        target = dest / name
        shutil.copytree(src, target, dirs_exist_ok=True)
        record = {"id": name, "source": f"local:{src}", "revision": None}
    else:
        from huggingface_hub import HfApi, snapshot_download

        model, _, pinned = entry.partition("@")  # org/name@<commit>: that revision; else the one the Hub has now
        target = dest / model
        info = HfApi().model_info(model, revision=pinned or None)
        patterns = WEIGHTS_ONLY if any(s.rfilename.endswith(".safetensors") for s in info.siblings or []) else None
        print(f"preload: downloading {model}@{info.sha} ...", flush=True)
        snapshot_download(model, revision=info.sha, local_dir=target, allow_patterns=patterns)
        shutil.rmtree(target / ".cache", ignore_errors=True)
        record = {"id": model, "source": "huggingface", "revision": info.sha}
    files = sorted(p for p in target.rglob("*") if p.is_file())
    record["path"] = str(target)
    record["files"] = [
        {"name": str(p.relative_to(target)), "bytes": p.stat().st_size, "sha256": sha256(p)} for p in files
    ]
    print(f"preload: {record['id']}: {len(files)} files, {sum(f['bytes'] for f in record['files']) / 1e9:.2f} GB")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", help="comma-separated Hub ids or name=/path entries; empty for none")
    parser.add_argument("--dest", type=Path, required=True)
    args = parser.parse_args(argv)
    args.dest.mkdir(parents=True, exist_ok=True)
    entries = [e.strip() for e in args.models.split(",") if e.strip()]
    manifest = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "models": [fetch(e, args.dest) for e in entries],
    }
    (args.dest / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
