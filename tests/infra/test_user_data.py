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
import time
from datetime import UTC, datetime
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


class SpotImds:
    """IMDSv2 on 127.0.0.1 as the Spot notice poller sees it: a token for PUT /latest/api/token (with a TTL
    header), the notice only with that token, 404 until `notice` is set (what AWS does until it interrupts)."""

    def __init__(self) -> None:
        import http.server
        import threading

        owner = self
        self.notice: dict | None = None
        self.requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):
                owner.requests.append(f"PUT {self.path}")
                ok = self.path == "/latest/api/token" and self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                self.answer(200 if ok else 400, "tok-2")

            def do_GET(self):
                owner.requests.append(f"GET {self.path}")
                if self.headers.get("X-aws-ec2-metadata-token") != "tok-2":
                    return self.answer(401, "")
                if self.path != "/latest/meta-data/spot/instance-action" or owner.notice is None:
                    return self.answer(404, "")
                self.answer(200, json.dumps(owner.notice))

            def answer(self, code: int, body: str) -> None:
                self.send_response(code)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def test_the_spot_notice_poller_writes_the_notice_when_imds_has_one(tmp_path):
    imds = SpotImds()
    poller = tmp_path / "poller"
    poller.write_text(heredoc(render(cluster="c", node_group="worker", gpu="true", spot="true", efa="false"), "NOTICE"))
    etc = tmp_path / "etc"
    etc.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "RAYFLEET_ETC": str(etc),
        "RAYFLEET_IMDS": imds.url,
        "RAYFLEET_SPOT_POLL_S": "0.2",
    }
    proc = subprocess.Popen(["bash", str(poller)], env=env)
    try:
        notice_file = etc / "spot-action.json"
        time.sleep(1.5)
        assert not notice_file.exists()  # no interruption: nothing written, polling goes on
        polls = sum(r == "GET /latest/meta-data/spot/instance-action" for r in imds.requests)
        assert polls >= 3
        imds.notice = {"action": "terminate", "time": "2026-11-24T10:00:00Z"}
        deadline = time.monotonic() + 10
        while not notice_file.exists():
            assert time.monotonic() < deadline, imds.requests[-5:]
            time.sleep(0.1)
        assert json.loads(notice_file.read_text()) == imds.notice
        assert stat.S_IMODE(notice_file.stat().st_mode) == 0o644
        assert imds.requests.count("PUT /latest/api/token") == 1  # one token, reused while it is valid
    finally:
        proc.kill()
        imds.server.shutdown()
    # what the worker's entry point makes of it (rayfleet/node/drain.py): the drain's message and time
    from rayfleet.node import drain

    two_minutes_before = datetime(2026, 11, 24, 9, 58, tzinfo=UTC).timestamp()
    message, left = drain.spot_notice(notice_file, now=two_minutes_before)
    assert message == "Spot interruption notice: terminate at 2026-11-24T10:00:00Z" and left == 120
    assert drain.deadline_for(left, 100) == 100 and drain.deadline_for(60, 100) == 60 - drain.SPOT_MARGIN_S
    assert drain.deadline_for(None, 100) == 100  # ECS's SIGTERM: the stopTimeout's share


CACHE_TEMPLATE = MODULES / "cluster" / "model_cache.sh.tftpl"
FAKE_DISK_TOOLS = {
    # lsblk -dpno NAME,MODEL: the disks and their models, as FAKE_DISKS says
    "lsblk": 'echo "lsblk $*" >> "$FAKE_LOG"; printf "%b" "$FAKE_DISKS"',
    "mountpoint": 'echo "mountpoint $*" >> "$FAKE_LOG"; exit 1',
    "mkfs.xfs": 'echo "mkfs.xfs $*" >> "$FAKE_LOG"',
    "mount": 'echo "mount $*" >> "$FAKE_LOG"',
    "chown": 'echo "chown $*" >> "$FAKE_LOG"',
}


def run_cache_script(tmp_path: Path, disks: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """model_cache.sh.tftpl as Terraform renders it, under `set -euo pipefail` as the user data runs it, with
    stand-ins for the disk tools (no root, no disk here); the calls they got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in FAKE_DISK_TOOLS.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    text = CACHE_TEMPLATE.read_text()
    assert set(re.findall(r"(?<!\$)\$\{(\w+)\}", text)) == {"cache_dir"}
    script = "set -euo pipefail\n" + text.replace("${cache_dir}", "/opt/rayfleet/cache").replace("$${", "${")
    log = tmp_path / "calls.log"
    log.touch()
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_LOG": str(log),
        "FAKE_DISKS": disks,
        "RAYFLEET_MODEL_CACHE_DIR": str(tmp_path / "cache"),
    }
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    return result, log.read_text().splitlines()


def test_the_model_cache_goes_on_the_instance_store_when_the_type_has_one(tmp_path):
    """g5.12xlarge: an EBS root and one NVMe instance-store drive; the store is formatted and mounted as the
    cache, which the Ray images' user (1000) owns."""
    disks = r"/dev/nvme0n1 Amazon Elastic Block Store\n/dev/nvme1n1 Amazon EC2 NVMe Instance Storage\n"
    result, calls = run_cache_script(tmp_path, disks)
    assert result.returncode == 0, result.stderr
    cache = tmp_path / "cache"
    assert cache.is_dir() and stat.S_IMODE(cache.stat().st_mode) == 0o755
    assert "mkfs.xfs -f -q /dev/nvme1n1" in calls
    assert f"mount -o noatime /dev/nvme1n1 {cache}" in calls
    assert calls[-1] == f"chown 1000:1000 {cache}"  # after the mount: the file system's own root


def test_without_an_instance_store_the_cache_is_a_folder_of_the_root_volume(tmp_path):
    result, calls = run_cache_script(tmp_path, r"/dev/nvme0n1 Amazon Elastic Block Store\n")
    assert result.returncode == 0, result.stderr
    assert not [c for c in calls if c.startswith(("mkfs", "mount "))]  # the root volume is never formatted
    assert (tmp_path / "cache").is_dir() and calls[-1] == f"chown 1000:1000 {tmp_path / 'cache'}"
