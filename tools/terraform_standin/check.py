"""`make lint-infra`'s Terraform half: `python -m tools.terraform_standin.check`.

`terraform fmt -check` over infra/, then `terraform init` (stand-in providers, no network) and
`terraform validate` of the root module and of every module on its own, on a scratch copy of infra/.
Prints each diagnostic as file:line and exits 1 on any error or unformatted file.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from tools.terraform_standin.workspace import INFRA, Terraform, describe, module_dirs, scratch_copy


def main() -> int:
    started = time.monotonic()
    tf = Terraform()
    failed = False
    fmt = tf.fmt_check(INFRA)
    if fmt.returncode != 0:
        print(f"terraform fmt -check: these files need `terraform fmt`:\n{fmt.stdout}{fmt.stderr}", file=sys.stderr)
        failed = True
    with tempfile.TemporaryDirectory(prefix="rayfleet-validate-") as tmp:
        root = scratch_copy(Path(tmp))
        for directory in module_dirs(root):
            name = directory.relative_to(root.parent)
            init = tf.init(directory)
            if init.returncode != 0:
                print(f"{name}: terraform init failed\n{init.output}", file=sys.stderr)
                failed = True
                continue
            result = tf.validate(directory)
            for d in result["diagnostics"]:
                print(f"{name}/{describe(d)}", file=sys.stderr)
            print(f"terraform validate {name}: {'valid' if result['valid'] else 'INVALID'}")
            failed = failed or not result["valid"]
    print(f"terraform fmt + validate ({tf.installed.providers_line()}): {time.monotonic() - started:.1f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
