"""Where the deployment's files are on the laptop: the Terraform root (infra/), the plan `deploy` applies, and
the outputs file every verb reads."""

from __future__ import annotations

from rayfleet.core import local_state

ROOT = local_state.project_dir()  # the project the verb runs in (a checkout): infra/, images/
INFRA = ROOT / "infra"
OUTPUTS = local_state.outputs_file()
PLAN_FILE = ".rayfleet.tfplan"  # inside infra/, git-ignored
