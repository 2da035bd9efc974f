"""The container instances' user data (infra/modules/cluster/user_data.sh.tftpl), rendered as Terraform renders
it and run here with stand-ins for curl and iptables (issue 15 items 1 and 9).

The guard it installs runs as root at every boot, before Docker and the ECS agent: it writes the instance's
identity for the gpu-metrics sidecar (the only thing that needed IMDS) and closes IMDS to containers: bridge
containers in DOCKER-USER (AWS's ECS guidance), and every non-root process in the host's network namespace in
OUTPUT, which covers host-network tasks (the EFA workers and their sidecar: images run as uid 1000 and 10001)
while the ECS agent, Docker and the SSM agent (root) keep it. awsvpc tasks are cut off by the agent itself
(ECS_AWSVPC_BLOCK_IMDS=true). What no test here can show is the kernel applying those rules on AWS.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from tests.infra.hcl import MODULES

TEMPLATE = MODULES / "cluster" / "user_data.sh.tftpl"
IMDS = "169.254.169.254"


def render(**values: str) -> str:
    """templatefile() for this template: ${name} interpolations only, $${ escapes a literal ${."""
    text = TEMPLATE.read_text()
    names = set(re.findall(r"(?<!\$)\$\{(\w+)\}", text))
    assert names == set(values), f"template variables {sorted(names)}"
    assert "%{" not in text.replace("%%{", "")
    text = re.sub(r"(?<!\$)\$\{(\w+)\}", lambda m: values[m.group(1)], text)
    return text.replace("$${", "${")


def rendered(efa: bool = False) -> str:
    return render(cluster="rayfleet", node_group="worker", gpu="true", spot="false", efa=str(efa).lower())


def heredoc(script: str, marker: str) -> str:
    match = re.search(rf"<<'?{marker}'?\n(.*?)\n{marker}\n", script, re.S)
    assert match, marker
    return match.group(1) + "\n"


def ecs_config(script: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in heredoc(script, "CONFIG").splitlines())


@pytest.mark.parametrize("efa", [False, True])
def test_the_agent_blocks_imds_for_awsvpc_and_serves_task_roles_to_host_networking_with_efa(efa):
    config = ecs_config(rendered(efa))
    assert config["ECS_AWSVPC_BLOCK_IMDS"] == "true"
    assert config["ECS_ENABLE_TASK_IAM_ROLE"] == "true"
    assert config["ECS_ENABLE_TASK_IAM_ROLE_NETWORK_HOST"] == str(efa).lower()


def test_the_user_data_is_valid_bash_and_installs_the_guard_as_a_boot_unit():
    script = rendered(efa=True)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    unit = heredoc(script, "UNIT")
    assert "Before=docker.service ecs.service" in unit and "ExecStart=/usr/local/sbin/rayfleet-imds-guard" in unit
    assert "WantedBy=multi-user.target" in unit and "Type=oneshot" in unit
    assert "systemctl enable --now rayfleet-imds-guard.service" in script
    dropin = heredoc(script, "DROPIN")  # fail closed: no agent, so no task, without the guard
    assert "Requires=rayfleet-imds-guard.service" in dropin and "After=rayfleet-imds-guard.service" in dropin
    assert "/etc/systemd/system/ecs.service.d/rayfleet-imds-guard.conf" in script
    assert subprocess.run(["bash", "-n"], input=heredoc(script, "GUARD"), text=True).returncode == 0


FAKE_CURL = r"""#!/bin/bash
# IMDSv2 stand-in: a token for PUT /latest/api/token, metadata only with that token.
echo "curl $*" >> "$FAKE_LOG"
url="${@: -1}"
case "$url" in
  */latest/api/token) [[ " $* " == *" -X PUT "* ]] && echo -n tok-1 && exit 0; exit 22 ;;
esac
[[ " $* " == *"X-aws-ec2-metadata-token: tok-1"* ]] || exit 22
case "$url" in
  */meta-data/instance-id) echo -n i-0abc123 ;;
  */meta-data/instance-type) echo -n p4d.24xlarge ;;
  */meta-data/placement/availability-zone) echo -n us-east-1a ;;
  *) exit 22 ;;
esac
"""

FAKE_IPTABLES = r"""#!/bin/bash
# iptables stand-in over a rules file: -N chain, -C chain rule, -I chain N rule.
echo "iptables $*" >> "$FAKE_LOG"
op="$1"; chain="$2"; shift 2
case "$op" in
  -N) grep -qx ":$chain" "$FAKE_RULES" && exit 1; echo ":$chain" >> "$FAKE_RULES" ;;
  -C) grep -qxF -- "-A $chain $*" "$FAKE_RULES" ;;
  -I) grep -qx ":$chain" "$FAKE_RULES" || [ "$chain" = OUTPUT ] || exit 1
      shift; echo "-A $chain $*" >> "$FAKE_RULES" ;;
  *) exit 2 ;;
esac
"""


def run_guard(tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in (("curl", FAKE_CURL), ("iptables", FAKE_IPTABLES)):
        tool = bin_dir / name
        tool.write_text(body)
        tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    guard = tmp_path / "guard"
    guard.write_text(heredoc(rendered(efa=True), "GUARD"))
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "FAKE_RULES": str(tmp_path / "rules"),
        "RAYFLEET_ETC": str(tmp_path / "etc-rayfleet"),
    }
    (tmp_path / "rules").touch()
    return subprocess.run(["bash", str(guard)], env=env, capture_output=True, text=True), tmp_path


def test_the_guard_writes_the_identity_file_and_closes_imds_once(tmp_path):
    for _ in range(2):  # every boot: the second run adds nothing
        result, _ = run_guard(tmp_path)
        assert result.returncode == 0, result.stderr
    identity = tmp_path / "etc-rayfleet" / "identity.json"
    assert json.loads(identity.read_text()) == {
        "instance_id": "i-0abc123",
        "instance_type": "p4d.24xlarge",
        "availability_zone": "us-east-1a",
    }
    assert stat.S_IMODE(identity.stat().st_mode) == 0o644  # readable by the sidecar's uid, written by root only
    rules = [line for line in (tmp_path / "rules").read_text().splitlines() if line.startswith("-A")]
    assert rules == [
        f"-A DOCKER-USER -d {IMDS}/32 -j DROP",
        f"-A OUTPUT -d {IMDS}/32 -m owner ! --uid-owner 0 -j REJECT",
    ]
    calls = (tmp_path / "calls.log").read_text()
    assert calls.count("X-aws-ec2-metadata-token-ttl-seconds") == 2  # IMDSv2: one token per boot


def test_the_guard_fails_loudly_when_imds_does_not_answer(tmp_path):
    (tmp_path / "bin").mkdir()
    broken = tmp_path / "bin" / "curl"
    broken.write_text("#!/bin/bash\nexit 7\n")
    broken.chmod(0o755)
    guard = tmp_path / "guard"
    guard.write_text(heredoc(rendered(), "GUARD"))
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "RAYFLEET_ETC": str(tmp_path / "etc")}
    result = subprocess.run(["bash", str(guard)], env=env, capture_output=True, text=True)
    assert result.returncode != 0 and not (tmp_path / "etc" / "identity.json").exists()
