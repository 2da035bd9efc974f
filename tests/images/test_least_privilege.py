"""Issue 27 item 5: nothing in the images can raise a privilege, and they work the way ECS runs them
(infra/modules/ray/task_definitions.tf): a read-only root file system, every capability dropped,
no-new-privileges, the image's own non-root user, task volumes at /tmp and /work (HOME) (and /run/rayfleet on
workers), /dev/shm.

On the production base (rayproject/ray: `ray ALL=NOPASSWD: ALL` in /etc/sudoers) the sudo checks are the
ones that bite. The local debootstrap base never had sudo, so here the setuid/setgid scan does: the base
carries su, mount, passwd, ... with their setuid bits (test_the_scan_finds_what_the_unhardened_base_carries
shows the scan finds them), and images/bin/rayfleet-harden clears them in every image."""

from __future__ import annotations

import errno
import json
import time
import uuid
from contextlib import ExitStack

import pytest

from tests.images.build import BASE
from tests.images.helpers import locked_down, podman, task_volumes

pytestmark = pytest.mark.integration
RAY_IMAGES = ("ray-head", "ray-worker", "trainer")
USERS = {
    "ray-head": "1000",
    "ray-worker": "1000",
    "trainer": "1000",
    "gpu-metrics": "10001",
    "ray-worker-models": "1000",
}

# Every regular file of the image's own file system (not what the engine mounts: /proc, /etc/hosts, ...) with a
# setuid or setgid bit or file capabilities, as root so that no directory hides one.
SCAN = r"""
import json, os, stat
root, found = os.lstat("/").st_dev, []
for top, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == root]
    for name in files:
        path = os.path.join(top, name)
        info = os.lstat(path)
        if info.st_dev != root or not stat.S_ISREG(info.st_mode):
            continue
        if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(f"{stat.filemode(info.st_mode)} {path}")
        try:
            os.getxattr(path, "security.capability", follow_symlinks=False)
            found.append(f"file capabilities {path}")
        except OSError:
            pass
print(json.dumps(found))
"""


def privileged_files(image: str) -> list[str]:
    result = podman("run", "--rm", "--user", "0", "--entrypoint", "python3", image, "-c", SCAN, timeout=300)
    return json.loads(result.stdout)


@pytest.mark.parametrize("image", [*RAY_IMAGES, "gpu-metrics", "ray-worker-models"])
def test_no_sudo_and_no_file_that_raises_privileges(built_images, running, image):
    host = running[image]
    assert host.user().uid == int(USERS[image])
    for command in ("sudo", "sudoedit", "doas"):
        assert not host.exists(command), f"{image}: {host.find_command(command)}"
    assert not host.file("/etc/sudoers").exists and not host.file("/etc/sudoers.d").exists
    assert host.run("dpkg-query -W -f='${db:Status-Status}' sudo").stdout.strip() in ("", "not-installed")
    assert privileged_files(built_images[image]) == []


def test_the_scan_finds_what_the_unhardened_base_carries(built_images):
    if podman("image", "exists", BASE, check=False).returncode != 0:
        pytest.skip(f"{BASE} is not here (images built elsewhere: RAYFLEET_IMAGES_PREBUILT)")
    found = privileged_files(BASE)
    assert any(line.endswith(" /usr/bin/su") and line.startswith("-rws") for line in found), found


# The trainer's job: `rayfleet-node driver rf_probe` runs this as the driver, and the driver runs it again as
# a Ray task on the trainer's own node (a Ray worker process there). Each writes where jobs and their
# libraries write (Hugging Face's and torch's caches, ~/.cache, tempfile, the working directory) and finds
# everything else read-only, itself without a capability or a way to gain one.
PROBE = r"""
import json, os, pathlib, tempfile

import ray
import torch

def probe():
    import huggingface_hub.constants as hf
    home = pathlib.Path.home()
    wrote = {}
    for name, where in {
        "hf_home": hf.HF_HOME,
        "torch_hub": torch.hub.get_dir(),
        "cache": home / ".cache" / "rf-probe",
        "cwd": pathlib.Path.cwd() / "rf-probe",
    }.items():
        path = pathlib.Path(where)
        path.mkdir(parents=True, exist_ok=True)
        (path / "probe").write_text("ok")
        wrote[name] = str(path)
    with tempfile.TemporaryDirectory() as tmp:
        torch.save(torch.ones(4) * 2, os.path.join(tmp, "t.pt"))
        assert torch.load(os.path.join(tmp, "t.pt"), weights_only=True).sum().item() == 8
        wrote["tempfile"] = tmp
    refused = {}
    for path in ("/opt/rayfleet/rf-probe", "/usr/local/bin/rf-probe", "/rf-probe", "/etc/rf-probe"):
        try:
            open(path, "w").close()
            refused[path] = None
        except OSError as exc:
            refused[path] = exc.errno
    status = dict(line.split(":", 1) for line in pathlib.Path("/proc/self/status").read_text().splitlines())
    return {
        "uid": os.getuid(), "home": str(home), "cwd": os.getcwd(), "wrote": wrote, "refused": refused,
        "no_new_privs": status["NoNewPrivs"].strip(), "cap_eff": status["CapEff"].strip(),
        "cap_bnd": status["CapBnd"].strip(),
    }

ray.init()
trainer = os.environ["RAYFLEET_TRAINER_RESOURCE"]
on_node = ray.get(ray.remote(num_cpus=0, resources={trainer: 0.01})(probe).remote())
print("rf-probe:", json.dumps({"driver": probe(), "task": on_node, "nodes": len(ray.nodes())}), flush=True)
"""


# The head's dashboard (the Jobs API's server) answers with the token; it starts a little after the GCS port
# the health check knocks on.
DASHBOARD = """
import os, time, urllib.request as u
auth = {"Authorization": "Bearer " + os.environ["RAY_AUTH_TOKEN"]}
request = u.Request("http://127.0.0.1:8265/api/version", headers=auth)
for attempt in range(90):
    try:
        print(u.urlopen(request, timeout=10).read().decode())
        break
    except OSError:
        if attempt == 89:
            raise
        time.sleep(1)
"""


def wait_healthy(name: str, timeout: float = 180) -> float:
    """Seconds until the head's health check (`rayfleet-node health`, the task definition's) passes."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if podman("exec", name, "rayfleet-node", "health", check=False, timeout=30).returncode == 0:
            return time.monotonic() - start
        state = podman("inspect", "-f", "{{.State.Status}}", name, check=False).stdout.strip()
        assert state == "running", f"the head exited ({state}):\n{podman('logs', name, check=False).stdout[-3000:]}"
        time.sleep(1)
    raise AssertionError(f"the head was not healthy within {timeout:.0f}s:\n{podman('logs', name).stdout[-3000:]}")


def test_the_head_and_a_trainer_driver_run_locked_down_as_on_ecs(built_images, tmp_path):
    """The head as ECS starts it reaches healthy, its dashboard answers with the token, and a trainer started
    the same way joins it as a node, runs its driver and a Ray task on its own node: Ray, the jobs' caches and
    tempfile need nothing writable beyond the task volumes and /dev/shm. Its own network (not the default,
    which rootless podman does not route between containers); nothing is published on the host. What only it
    proves (the rehearsal runs the same flags, but only sees that its jobs succeed): each cache a job uses
    (Hugging Face, torch hub, ~/.cache, tempfile, the working directory) is written under the volumes, and
    /opt, /etc, / are refused, about 25 s in the images tier instead of a rehearsal."""
    token, run = uuid.uuid4().hex + uuid.uuid4().hex, uuid.uuid4().hex[:6]
    network, head, trainer = f"rf-test-net-{run}", f"rf-test-head-{run}", f"rf-test-trainer-{run}"
    probe = tmp_path / "probe"
    probe.mkdir(mode=0o755)
    (probe / "rf_probe.py").write_text(PROBE)
    (probe / "rf_probe.py").chmod(0o644)
    ray_env = ["-e", f"RAY_AUTH_TOKEN={token}"]
    common = ["--init", "--shm-size", "512m", "--network", network, *locked_down("1000"), *ray_env]
    with ExitStack() as cleanup:  # on the way out: the containers, then their volumes, then the network
        podman("network", "create", network)
        cleanup.callback(podman, "network", "rm", "-f", network, check=False)
        head_volumes = cleanup.enter_context(task_volumes("/tmp", "/work"))
        trainer_volumes = cleanup.enter_context(task_volumes("/tmp", "/work"))
        for name in (head, trainer):
            cleanup.callback(podman, "rm", "-f", "-t", "0", name, check=False)
        podman("run", "-d", "--name", head, *common, *head_volumes, built_images["ray-head"], "head")
        took = wait_healthy(head)
        version = podman("exec", head, "python", "-c", DASHBOARD, check=False, timeout=120)
        assert version.returncode == 0, version.stdout + version.stderr
        assert json.loads(version.stdout)["ray_version"], version.stdout
        address = podman("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", head)
        driver = podman(
            "run",
            "--rm",
            "--name",
            trainer,
            *common,
            *trainer_volumes,
            "-v",
            f"{probe}:/opt/rf-probe:ro",
            "-e",
            "PYTHONPATH=/opt/rayfleet/src:/opt/rf-probe",
            "-e",
            f"RAYFLEET_HEAD_HOST={address.stdout.strip()}",
            "-e",
            "RAYFLEET_HEAD_WAIT_S=60",
            built_images["trainer"],
            "rf_probe",
            check=False,
            timeout=300,
        )
        output = driver.stdout + driver.stderr
        assert driver.returncode == 0, output[-4000:]
        line = next(line for line in driver.stdout.splitlines() if line.startswith("rf-probe: "))
        report = json.loads(line.removeprefix("rf-probe: "))
        assert report["nodes"] == 2
        for where in ("driver", "task"):
            seen = report[where]
            assert seen["uid"] == 1000 and seen["home"] == "/work", seen
            assert seen["no_new_privs"] == "1" and int(seen["cap_eff"], 16) == int(seen["cap_bnd"], 16) == 0, seen
            assert all(path.startswith(("/work/", "/tmp/")) for path in seen["wrote"].values()), seen
            assert set(seen["refused"].values()) == {errno.EROFS}, seen  # the root file system, not a permission
        head_logs = podman(
            "exec", head, "sh", "-c", "grep -rlI 'Read-only file system' /tmp/ray/session_latest/logs || true"
        )
        assert head_logs.stdout.strip() == "", head_logs.stdout
        assert "Read-only file system" not in output, output[-4000:]
        # ECS stops the head with SIGTERM: it still ends cleanly (exit 0)
        podman("stop", "-t", "60", head, timeout=120)
        assert podman("inspect", "-f", "{{.State.ExitCode}}", head).stdout.strip() == "0"
        print(f"head healthy after {took:.0f}s")
