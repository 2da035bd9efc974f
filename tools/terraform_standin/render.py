"""Terraform's rendered state of infra/, offline: what `make deploy` would leave in the state file.

    python -m tools.terraform_standin.render [--var-file one-group.tfvars] [--var name=value] [--picture]

`terraform init`, `apply -auto-approve` into a scratch state and `show -json`, through the pinned
Terraform, on a scratch copy of infra/ (workspace.py), with the stand-in providers in render mode
(TF_STANDIN_MODE=render, values.py): every expression, jsonencode, template and precondition of the root
module and its modules is Terraform's own evaluation; what AWS would compute (ids, ARNs, the bucket's
and secret's unique suffixes, the AMI ids, the zones) is made up deterministically, for account
123456789012. No mock_provider: the same apply a deployment runs. It takes about 5 s.

`rendered_state()` returns the `terraform show -json` document ({"values": {"outputs", "root_module"}})
and caches it in this process per content: a hash of every file of the infra/ it renders, the files
infra/ reads outside itself (the names of images/*/Dockerfile, monitoring/metrics.json), the stand-in's
render code, the variable files' content and the variables. `--picture` prints the deployment picture
tools/rendered.py builds from it instead.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tools.terraform_standin.workspace import INFRA, REPO, Terraform, scratch_copy

HERE = Path(__file__).resolve().parent
IMAGE_TAG = "0123456789ab"  # image_tag has no default; a git-like tag, as make deploy passes one
RENDER_ENV = {"TF_STANDIN_MODE": "render"}
_SKIPPED_PARTS = {".terraform"}
_SKIPPED_SUFFIXES = (".tfstate", ".tfplan", ".lock.hcl", ".backup")

# What the harness's stand-ins deploy unless told otherwise (tools/moto_stack, tools/rehearsal): one worker group of
# 2 nodes kept running, so the services' tasks exist from the start; infra/'s default groups start at zero.
ONE_GROUP = INFRA / "one-group.tfvars"

_cache: dict[str, dict] = {}
_lock = threading.Lock()


class RenderFailed(RuntimeError):
    pass


def _files(root: Path):
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not _SKIPPED_PARTS & set(rel.parts) and not path.name.endswith(_SKIPPED_SUFFIXES):
            yield rel, path


def content_key(
    infra: Path = INFRA,
    var_files: Sequence[Path] = (),
    variables: Mapping[str, str] | None = None,
    image_tag: str = IMAGE_TAG,
) -> str:
    """What the rendered state depends on, hashed."""
    h = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        h.update(hashlib.sha256(label.encode()).digest() + hashlib.sha256(data).digest())

    for rel, path in _files(infra):
        add(f"infra/{rel}", path.read_bytes())
    for dockerfile in sorted((REPO / "images").glob("*/Dockerfile")):  # infra/ reads only their names
        add("images", str(dockerfile.relative_to(REPO)).encode())
    add("metrics", (REPO / "monitoring" / "metrics.json").read_bytes())
    for name in ("values.py", "server.py"):
        add(name, (HERE / name).read_bytes())
    for path in var_files:
        add(f"var-file {path.name}", path.read_bytes())
    add("variables", json.dumps(sorted((variables or {}).items())).encode())
    add("image_tag", image_tag.encode())
    return h.hexdigest()


def _var_file(infra: Path, name: str | Path) -> Path:
    path = Path(name)
    for candidate in (path, infra / path):
        if candidate.is_file():
            return candidate.resolve()
    raise FileNotFoundError(f"variable file {name} not found (nor in {infra})")


def rendered_state(
    *,
    infra: Path = INFRA,
    var_files: Sequence[str | Path] = (),
    variables: Mapping[str, str] | None = None,
    image_tag: str = IMAGE_TAG,
    cached: bool = True,
) -> dict:
    """`terraform show -json` after applying `infra` (infra/ itself, or a patched copy of it) offline;
    cached=False renders again (and replaces the cached state)."""
    infra = Path(infra).resolve()
    files = [_var_file(infra, f) for f in var_files]
    key = content_key(infra, files, variables, image_tag)
    with _lock:
        if not cached:
            _cache.pop(key, None)
        if key not in _cache:
            _cache[key] = _render(infra, files, dict(variables or {}), image_tag)
        return copy.deepcopy(_cache[key])


def _initialized(tf: Terraform, tmp: str, infra: Path) -> Path:
    root = scratch_copy(Path(tmp), source=infra)
    init = tf.init(root)
    if init.returncode != 0:
        raise RenderFailed(f"terraform init failed\n{init.output[-4000:]}")
    return root


def _render(infra: Path, var_files: list[Path], variables: dict, image_tag: str) -> dict:
    tf = Terraform()
    with tempfile.TemporaryDirectory(prefix="rayfleet-render-") as tmp:
        root = _initialized(tf, tmp, infra)
        args = ["apply", "-auto-approve", "-input=false", "-no-color", "-lock=false", f"-var=image_tag={image_tag}"]
        args += [f"-var-file={path}" for path in var_files]
        args += [f"-var={name}={value}" for name, value in sorted(variables.items())]
        apply = tf.run(root, *args, env=RENDER_ENV)
        if apply.returncode != 0:
            raise RenderFailed(f"terraform apply (render mode) failed\n{apply.output[-6000:]}")
        show = tf.run(root, "show", "-json", "-no-color", env=RENDER_ENV)
        if show.returncode != 0:
            raise RenderFailed(f"terraform show failed\n{show.output[-4000:]}")
        return json.loads(show.stdout)


def rendered_plan(*, infra: Path = INFRA, var_files: Sequence[str | Path] = (), image_tag: str = IMAGE_TAG) -> dict:
    """`terraform show -json` of a saved plan of `infra` against an empty state, offline: the document
    `make deploy` reads for the plan's summary, cost and preflight shape."""
    infra = Path(infra).resolve()
    files = [_var_file(infra, f) for f in var_files]
    key = ("plan", content_key(infra, files, None, image_tag))
    with _lock:
        if key not in _cache:
            _cache[key] = _plan(infra, files, image_tag)
        return copy.deepcopy(_cache[key])


def _plan(infra: Path, var_files: list[Path], image_tag: str) -> dict:
    tf = Terraform()
    with tempfile.TemporaryDirectory(prefix="rayfleet-plan-") as tmp:
        root = _initialized(tf, tmp, infra)
        args = ["plan", "-input=false", "-no-color", "-lock=false", "-out=saved.tfplan", f"-var=image_tag={image_tag}"]
        args += [f"-var-file={path}" for path in var_files]
        planned = tf.run(root, *args, env=RENDER_ENV)
        if planned.returncode != 0:
            raise RenderFailed(f"terraform plan (render mode) failed\n{planned.output[-6000:]}")
        show = tf.run(root, "show", "-json", "-no-color", "saved.tfplan", env=RENDER_ENV)
        if show.returncode != 0:
            raise RenderFailed(f"terraform show failed\n{show.output[-4000:]}")
        return json.loads(show.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--var-file", action="append", default=[], help="a .tfvars file (infra/one-group.tfvars)")
    parser.add_argument("--var", action="append", default=[], help="name=value, as terraform -var")
    parser.add_argument("--image-tag", default=IMAGE_TAG)
    parser.add_argument("--picture", action="store_true", help="print the deployment picture, not the state")
    args = parser.parse_args(argv)
    variables = dict(v.split("=", 1) for v in args.var)
    started = time.monotonic()
    state = rendered_state(var_files=args.var_file, variables=variables, image_tag=args.image_tag)
    if args.picture:
        from tools import rendered

        state = rendered.picture(state, source=f"infra/ {' '.join(args.var_file)}".strip())
    json.dump(state, sys.stdout, indent=1, sort_keys=True)
    print()
    print(f"rendered in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
