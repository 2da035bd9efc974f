"""`uv pip install` into a virtual environment, from what pip on this machine installs from: `make setup`'s
installer (.venv and .venv-checkov).

    python -m tools.uv_install VENV_PYTHON [uv pip install arguments ...]

uv (pinned in requirements/uv.txt, installed into .venv by pip first) resolves and installs the pinned sets in
about a minute where pip took four to five on a 2-core machine, most of it pip's resolver and unpacking in
Python. uv does not read pip's configuration, so this passes it on (rayfleet/core/pip_config.py: indexes,
local wheel directories, constraints, pip's rule for several indexes; here: the CA bundle and timeout).
Standard library only: nothing else is installed yet when it runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rayfleet.core import pip_config

UV = Path(sys.executable).parent / "uv"


def uv_command(venv_python: str, args: list[str], settings: dict[str, str]) -> list[str]:
    # --compile-bytecode: pip compiles .pyc at install and uv does not; where PYTHONDONTWRITEBYTECODE is set
    # (CI hosts), no process would ever write them, and every import of torch, Ray, ... compiled from source.
    flags = pip_config.uv_flags(settings)
    return [str(UV), "pip", "install", "--python", venv_python, "--compile-bytecode", *flags, *args]


def uv_environment(settings: dict[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    if "cert" in settings:  # an intercepting proxy's CA, as pip trusts it
        env["SSL_CERT_FILE"] = settings["cert"]
    if "default-timeout" in settings:
        env["UV_HTTP_TIMEOUT"] = settings["default-timeout"]
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if not UV.exists():
        print(f"error: {UV} is missing: `{sys.executable} -m pip install -r requirements/uv.txt`", file=sys.stderr)
        return 2
    settings = pip_config.settings(argv[0])
    command = uv_command(argv[0], argv[1:], settings)
    os.execve(command[0], command, uv_environment(settings))


if __name__ == "__main__":
    sys.exit(main())
