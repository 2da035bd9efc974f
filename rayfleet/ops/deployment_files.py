"""Where the deployment's files are on the laptop: the Terraform root (infra/), the plan `deploy` applies, and
the outputs file every verb reads."""

from __future__ import annotations

import os
from pathlib import Path

from rayfleet.ecs.outputs import DEFAULT_FILE

ROOT = Path(__file__).resolve().parents[2]  # the checkout (an editable install): infra/, images/
INFRA = ROOT / "infra"
OUTPUTS = Path(os.environ.get("RAYFLEET_OUTPUTS") or DEFAULT_FILE)  # the one default: rayfleet/ecs/outputs.py
PLAN_FILE = ".rayfleet.tfplan"  # inside infra/, git-ignored
