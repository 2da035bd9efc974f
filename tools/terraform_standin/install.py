"""Build the stand-in providers into a local plugin mirror: `python -m tools.terraform_standin.install`.

Idempotent (stamps per step; a second run takes well under a second), run by `make setup` and by the infra
tests' fixture. Everything lands under .terraform-standin/ (gitignored):

  venv/                      the stand-in's runtime (requirements/terraform-standin.txt)
  downloads/                 the pinned CDKTF wheels (requirements/terraform-schemas.txt, hash-checked)
  schemas/<name>_<version>.json   the regenerated `providers schema -json` (+ .pb, the served protobuf)
  plugins/registry.terraform.io/hashicorp/<name>/<version>/<os>_<arch>/terraform-provider-<name>_v<version>
                             a launcher script: the stand-in venv's python running server.py on the schema
  terraformrc                the CLI configuration the tests use: no checkpoint, providers only from plugins/

`terraform init -backend=false -plugin-dir .terraform-standin/plugins` then installs them as
hashicorp/aws 5.100.0 and hashicorp/random 3.7.2, with no network.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
ROOT = REPO / ".terraform-standin"
STANDIN_REQUIREMENTS = REPO / "requirements" / "terraform-standin.txt"
SCHEMA_REQUIREMENTS = REPO / "requirements" / "terraform-schemas.txt"
PIP_DOWNLOAD = (sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps")
# Builds <schema>.pb once, in the stand-in's venv (its protobuf), so no provider start pays for it.
BUILD_PB = (
    "import sys, pathlib; sys.path.insert(0, sys.argv[1]); import server;"
    " server.schema_response_bytes(pathlib.Path(sys.argv[2]))"
)


@dataclass(frozen=True)
class Installed:
    root: Path
    plugin_dir: Path
    cli_config: Path
    providers: dict  # "hashicorp/aws" -> {"version", "schema", "package"}

    def providers_line(self) -> str:
        """hashicorp/aws 5.100.0, hashicorp/random 3.7.2 (stand-ins)"""
        names = ", ".join(f"{s} {p['version']}" for s, p in sorted(self.providers.items()))
        return f"{names} (stand-ins)"

    def env(self, base: dict | None = None) -> dict:
        """Environment for running the pinned Terraform against the stand-ins, offline."""
        env = dict(os.environ if base is None else base)
        for key in ("TF_PLUGIN_CACHE_DIR", "TF_DATA_DIR", "TF_WORKSPACE", "TF_LOG"):
            env.pop(key, None)
        env.update(
            TF_CLI_CONFIG_FILE=str(self.cli_config),
            CHECKPOINT_DISABLE="1",
            TF_IN_AUTOMATION="1",
            TF_INPUT="0",
        )
        return env


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(hashlib.sha256(p).digest())
    return h.hexdigest()


def _stamped(stamp: Path, digest: str) -> bool:
    return stamp.exists() and stamp.read_text() == digest


def _log(quiet: bool, msg: str) -> None:
    if not quiet:
        print(f"terraform-standin: {msg}", flush=True)


def os_arch() -> str:
    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return f"{platform.system().lower()}_{arch}"


def _venv(root: Path, quiet: bool) -> Path:
    venv = root / "venv"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    digest = _digest(STANDIN_REQUIREMENTS.read_bytes())
    if python.exists() and _stamped(stamp, digest):
        return python
    _log(quiet, f"creating {venv.relative_to(REPO)} ({STANDIN_REQUIREMENTS.relative_to(REPO)})")
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(STANDIN_REQUIREMENTS)],
        check=True,
    )
    stamp.write_text(digest)
    return python


def _downloads(root: Path, quiet: bool) -> list[Path]:
    out = root / "downloads"
    stamp = out / ".downloaded"
    digest = _digest(SCHEMA_REQUIREMENTS.read_bytes())
    if not _stamped(stamp, digest):
        _log(quiet, f"downloading the CDKTF provider packages ({SCHEMA_REQUIREMENTS.relative_to(REPO)})")
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("*.whl"):
            old.unlink()
        subprocess.run(
            [*PIP_DOWNLOAD, "--require-hashes", "-r", str(SCHEMA_REQUIREMENTS), "-d", str(out)],
            check=True,
        )
        stamp.write_text(digest)
    return sorted(out.glob("*.whl"))


def _extract_jsii(wheel: Path, dest: Path) -> Path:
    """The npm package (package.json, .jsii, lib/**.js) that the wheel embeds as _jsii/*.jsii.tgz."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".jsii.tgz")]
        data = zf.read(name)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tf:
        tf.extractall(dest, filter="data")
    return dest / "package"


def _schema(wheel: Path, root: Path, quiet: bool) -> tuple[str, str, Path]:
    from tools.terraform_standin import schemagen

    schemas = root / "schemas"
    schemas.mkdir(parents=True, exist_ok=True)
    digest = _digest(wheel.read_bytes(), Path(schemagen.__file__).read_bytes())
    index = schemas / f"{wheel.name}.json"
    if _stamped(schemas / f"{wheel.name}.stamp", digest) and index.exists():
        meta = json.loads(index.read_text())
        return meta["source"], meta["version"], Path(meta["schema"])
    _log(quiet, f"generating the schema from {wheel.name}")
    with tempfile.TemporaryDirectory(prefix="cdktf-") as tmp:
        package = _extract_jsii(wheel, Path(tmp))
        generated = schemagen.generate(package)
    source, version, doc, stats = generated.source, generated.version, generated.schema, generated.stats
    name = source.rsplit("/", 1)[1]
    schema = schemas / f"{name}_{version}.json"
    schema.write_text(json.dumps(doc, sort_keys=True, separators=(",", ":")))
    meta = {"source": source, "version": version, "schema": str(schema), "package": wheel.name, "stats": stats}
    index.write_text(json.dumps(meta, indent=1))
    (schemas / f"{wheel.name}.stamp").write_text(digest)
    return source, version, schema


def _launcher(root: Path, python: Path, source: str, version: str, schema: Path, package: str) -> Path:
    host, namespace, name = source.split("/")
    binary = root / "plugins" / host / namespace / name / version / os_arch() / f"terraform-provider-{name}_v{version}"
    binary.parent.mkdir(parents=True, exist_ok=True)
    text = (
        "#!/bin/sh\n"
        f"# Stand-in for {namespace}/{name} {version}: its schema, regenerated from {package}; no real\n"
        "# provider behind it (tools/terraform_standin). Written by install.py.\n"
        f'exec "{python}" "{HERE / "server.py"}" "{schema}"\n'
    )
    if not binary.exists() or binary.read_text() != text:
        binary.write_text(text)
        binary.chmod(0o755)
    return binary


def ensure(root: Path = ROOT, quiet: bool = False) -> Installed:
    root.mkdir(parents=True, exist_ok=True)
    python = _venv(root, quiet)
    providers = {}
    for wheel in _downloads(root, quiet):
        source, version, schema = _schema(wheel, root, quiet)
        _launcher(root, python, source, version, schema, wheel.name)
        pb = schema.with_suffix(".pb")
        if not pb.exists() or pb.stat().st_mtime < schema.stat().st_mtime:
            _log(quiet, f"building {pb.name}")
            subprocess.run([str(python), "-c", BUILD_PB, str(HERE), str(schema)], check=True)
        providers["/".join(source.split("/")[1:])] = {"version": version, "schema": schema, "package": wheel.name}
    cli_config = root / "terraformrc"
    rc = (
        "# The stand-in providers only (tools/terraform_standin/install.py): no registry, no checkpoint.\n"
        "disable_checkpoint = true\n"
        "provider_installation {\n"
        f'  filesystem_mirror {{\n    path = "{root / "plugins"}"\n  }}\n'
        "}\n"
    )
    if not cli_config.exists() or cli_config.read_text() != rc:
        cli_config.write_text(rc)
    return Installed(root=root, plugin_dir=root / "plugins", cli_config=cli_config, providers=providers)


def main() -> int:
    installed = ensure()
    for source, p in sorted(installed.providers.items()):
        print(f"terraform-standin: {source} {p['version']} <- {p['package']}")
    print(f"terraform-standin: plugin dir {installed.plugin_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
