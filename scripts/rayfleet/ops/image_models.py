"""What `make build` preloads, and where: the models the built-in recipes fine-tune (MODELS= names others, `none`
none), into `ray-worker:<tag>-models` (images/ray-worker/models.Dockerfile), the image the worker groups with
`models = true` run (infra/variables.tf; the default's fsdp group), so their ranks load the weights from their own
node. The trainer (the driver) and the other groups' workers hold none: a 1-GPU DDP node never pulls 14 GB.

Before the build it says what it preloads, its size, and checks the disk; offline (a short probe of the Hub) it
says in one line that it cannot preload a Hub model and builds without it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import yaml

from rayfleet.core.errors import RayfleetError
from rayfleet.core.net import PROBE_S, reachable
from rayfleet.core.worker_groups import MODELS_TAG_SUFFIX
from rayfleet.ecs.outputs import Outputs
from rayfleet.ops.image_sizes import REVISIONS, human, model_size

HUB = "https://huggingface.co"
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
NONE = "none"
# The disk a build needs per byte of weights: the download in the models stage, its copy into the image's
# layer, and the engine's commit of that layer.
DISK_FACTOR = 3.0


def groups_from_image(out: Outputs) -> list[str]:
    """The deployed worker groups that run ray-worker:<tag>-models (the others with models read the S3 cache)."""
    return [name for name, group in out.worker_groups.items() if group.models and group.models_from == "image"]


def models_tag(tag: str) -> str:
    return f"{tag}{MODELS_TAG_SUFFIX}"


def recipe_models(root: Path) -> list[str]:
    """The Hugging Face models the built-in recipes (recipes/*.yaml) train: a `model=` argument, else the `model`
    of the job config their `--config` names, at their pinned revision (org/name@<commit>: REVISIONS); local
    paths (fsdp-tiny's tiny model) are not preloaded."""
    found: list[str] = []
    for path in sorted((root / "recipes").glob("*.yaml")):
        recipe = yaml.safe_load(path.read_text()) or {}
        args = [a for a in recipe.get("args") or [] if isinstance(a, str)]
        model = next((a.split("=", 1)[1] for a in args if a.startswith("model=")), None)
        if model is None and "--config" in args[:-1]:
            config = path.parent / recipe.get("code", ".") / args[args.index("--config") + 1]
            model = (yaml.safe_load(config.read_text()) or {}).get("model") if config.is_file() else None
        if model and HUB_ID.fullmatch(model) and model not in found:
            found.append(model)
    return [f"{m}@{REVISIONS[m]}" if m in REVISIONS else m for m in found]


def chosen(
    models: str | None, root: Path, say: Callable[[str], None] = print, online: Callable[[str], bool] = reachable
) -> list[str]:
    """The entries to preload: `models` (comma-separated Hub ids or name=/dir; `none`: nothing), else the built-in
    recipes' models. A Hub id is dropped, in one line, when the Hub does not answer."""
    if models is not None and models.strip().lower() == NONE:
        return []
    entries = [e.strip() for e in (models or "").split(",") if e.strip()] or recipe_models(root)
    hub = [e for e in entries if "=" not in e]
    if hub and not online(HUB):
        say(f"cannot preload {', '.join(hub)}: no network (huggingface.co did not answer within {PROBE_S:g} s); "
            f"building without: the ranks that need it will fail until `make build push` runs online")  # fmt: skip
        return [e for e in entries if "=" in e]
    return entries


def plan(entries: list[str], tag: str, groups: list[str] | None) -> list[str]:
    """What the models image holds, for whom, and its size (said before the build)."""
    image = f"ray-worker:{models_tag(tag)}"
    who = f"worker group(s) {', '.join(groups)}" if groups else "the worker groups with models = true"
    if not entries:
        return [f"{image} (for {who}) preloads nothing (MODELS=none, or none could be): their ranks download "
                "the model from the Hub, or fail in one line naming it"]  # fmt: skip
    lines = [f"{image} (for {who}; the trainer and other groups hold no weights) preloads:"]
    sizes = {e: model_size(e) for e in entries}
    width = max(len(e) for e in [*entries, "total"])
    lines += [f"  {e:<{width}}  {'size unknown' if n is None else '~' + human(n)}" for e, n in sizes.items()]
    known = sum(n for n in sizes.values() if n is not None)
    more = " and the models of unknown size" if None in sizes.values() else ""
    return [*lines, f"  {'total':<{width}}  ~{human(known)}{more}"]


def mounts(models: str) -> tuple[list[str], str]:
    """name=/host/dir entries become mounts at /mnt/models-src/<name>; Hub ids pass through."""
    volumes, entries = [], []
    for entry in [e.strip() for e in models.split(",") if e.strip()]:
        if "=" in entry:
            name, path = entry.split("=", 1)
            host = Path(path).resolve()
            if not (host / "config.json").is_file():
                raise RayfleetError(f"--models {entry}: {host} is not a model directory (make text-data makes one)")
            volumes += ["-v", f"{host}:/mnt/models-src/{name}:ro"]
            entries.append(f"{name}=/mnt/models-src/{name}")
        else:
            entries.append(entry)
    return volumes, ",".join(entries)


def engine_store(tool: str) -> Path | None:
    """Where the engine keeps its images (podman's graph root, docker's root dir); None when it does not say."""
    fmt = "{{.Store.GraphRoot}}" if tool == "podman" else "{{.DockerRootDir}}"
    result = subprocess.run([tool, "info", "--format", fmt], capture_output=True, text=True)
    found = result.stdout.strip() if result.returncode == 0 else ""
    return Path(found) if found else None


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def check_disk(entries: list[str], store: Path | None, say: Callable[[str], None] = print) -> None:
    """Refuse, in one line, a build whose models would not fit the engine's disk."""
    if store is None or not entries:
        return
    need = DISK_FACTOR * sum(n for n in (model_size(e) for e in entries) if n is not None)
    try:
        left = free_bytes(store)
    except OSError as exc:  # a remote engine (DOCKER_HOST): its disk is not this machine's
        say(f"cannot check the disk for the models ({store}: {exc.strerror or exc}); building anyway")
        return
    if need > left:
        raise RayfleetError(
            f"preloading {', '.join(entries)} needs about {human(need)} of disk under {store}, which has "
            f"{human(left)} free: free some, or build with MODELS=none"
        )
