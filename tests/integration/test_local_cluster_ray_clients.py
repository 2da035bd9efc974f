"""Ray's own clients against a real local cluster, the way a new user meets them: a shell without the
virtualenv on PATH, `eval "$(.venv/bin/rayfleet cluster env)"`, then `ray job submit`,
`ray status`, `ray list nodes` and JobSubmissionClient. Also `run`, the nodes' memory and private dirs.

They use the session's cluster (same shape as `rayfleet cluster up`: head + 2 workers x 1 CPU), met from a
shell that knows only its state directory, token file and ports, as a user's shell knows only the defaults.
`run` starting a cluster of its own is test_ddp_starts_its_own_cluster's (last, alone).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from rayfleet.local import cluster as local_cluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
CLI = [sys.executable, "-m", "rayfleet.cli.main", "cluster"]
SHOW_RESOURCES = "import json, ray; ray.init(); print('RESOURCES', json.dumps(ray.cluster_resources()))"
LIST_JOBS = (  # the Python client, with no address: it reads RAY_API_SERVER_ADDRESS like the CLI
    "from ray.job_submission import JobSubmissionClient as C; "
    "print({j.submission_id: j.status.value for j in C().list_jobs()})"
)
HELLO = """import ray
ray.init()
print("hello from a job on", len([n for n in ray.nodes() if n["Alive"]]), "nodes")
"""


def new_user_env(state_dir: Path, token_file: Path, ray_port: int, dashboard_port: int) -> dict[str, str]:
    """This environment without Ray's variables or the virtualenv on PATH, pointed at one cluster."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_") and k != "VIRTUAL_ENV"}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p) != VENV_BIN)
    env.update(
        RAYFLEET_STATE_DIR=str(state_dir),
        RAYFLEET_RAY_TOKEN_FILE=str(token_file),
        RAYFLEET_RAY_PORT=str(ray_port),
        RAYFLEET_DASHBOARD_PORT=str(dashboard_port),
        PYTHONUNBUFFERED="1",
    )
    return env


def shell(env: dict, script: str, cwd: Path = REPO, timeout: int = 120) -> subprocess.CompletedProcess:
    """`script` in bash after the user's `eval "$(.venv/bin/rayfleet cluster env)"`."""
    prelude = f'eval "$(cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -m rayfleet.cli.main cluster env)"'
    return subprocess.run(
        ["/bin/bash", "-c", f"set -e; {prelude}; {script}"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def resources_from(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("RESOURCES "))
    return json.loads(line.removeprefix("RESOURCES "))


def assert_memory_fits_the_host(resources: dict) -> None:
    """Each node advertises its share: all of them together fit in the host (Ray's default: the host each)."""
    assert resources["memory"] + resources["object_store_memory"] <= psutil.virtual_memory().total


@pytest.fixture
def cluster(cluster_env) -> dict:
    """A new user's shell for the session cluster: no Ray variables, no virtualenv on PATH."""
    return new_user_env(
        Path(cluster_env["RAYFLEET_STATE_DIR"]),
        Path(cluster_env["RAYFLEET_RAY_TOKEN_FILE"]),
        int(cluster_env["RAYFLEET_RAY_PORT"]),
        int(cluster_env["RAYFLEET_DASHBOARD_PORT"]),
    )


def test_ray_job_submit_after_eval_env(cluster, tmp_path):
    (tmp_path / "hello.py").write_text(HELLO)
    submitted = shell(cluster, "ray job submit --working-dir . -- python hello.py", cwd=tmp_path)
    output = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, output[-3000:]
    assert "hello from a job on 3 nodes" in output
    job_id = re.search(r"Job '(raysubmit_\w+)' succeeded", output).group(1)
    status = shell(cluster, f"ray job status {job_id}")
    assert status.returncode == 0 and f"Job '{job_id}' succeeded" in status.stdout + status.stderr
    listed = shell(cluster, f"python -c {shlex.quote(LIST_JOBS)}")
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert f"'{job_id}': 'SUCCEEDED'" in listed.stdout


def test_ray_status_and_ray_list_nodes_see_the_nodes(cluster):
    listed = shell(cluster, "ray list nodes --format json")
    assert listed.returncode == 0, listed.stderr[-3000:]
    nodes = [n for n in json.loads(listed.stdout) if n["state"] == "ALIVE"]  # earlier tests' nodes are DEAD
    assert len(nodes) == 3
    memory = sorted((n["is_head_node"], n["resources_total"]["memory"]) for n in nodes)
    assert memory[2] == (True, "1.000 GiB")  # the head's small share (Ray prints the bytes so)
    assert memory[0] == memory[1]  # the workers split the rest evenly
    deadline = time.monotonic() + 60
    while True:  # the autoscaler's report, which `ray status` prints, trails the nodes by a few seconds
        status = shell(cluster, "ray status")
        assert status.returncode == 0, status.stderr[-3000:]
        active = status.stdout.split("Active:")[1].split("Pending:")[0]
        idle = "0.0/2.0 CPU" in status.stdout  # an earlier test's job may still be giving its CPUs back
        if (active.count("node_") == 3 and idle) or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert active.count("node_") == 3, status.stdout
    assert "0.0/2.0 CPU" in status.stdout


def test_run_uses_the_running_cluster_and_leaves_it_running(cluster):
    result = subprocess.run(
        [*CLI, "run", "--workers", "5", "--", "python", "-c", SHOW_RESOURCES],
        env=cluster,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "starting" not in result.stdout
    resources = resources_from(result.stdout)
    assert resources["CPU"] == 2.0  # the running cluster's 2 workers, not 5
    assert_memory_fits_the_host(resources)
    failed = subprocess.run([*CLI, "run", "--", "python", "-c", "raise SystemExit(3)"], env=cluster, cwd=REPO)
    assert failed.returncode == 3
    state = subprocess.run([*CLI, "status"], env=cluster, cwd=REPO, capture_output=True, text=True)
    assert "group a: 1 node(s) x 1 CPU; group b: 1 node(s) x 1 CPU" in state.stdout  # the session cluster


def test_session_dir_and_logs_are_the_users_only(cluster):
    """Ray makes its --temp-dir 0777 whenever a node or job starts; the directory above it stays 0700."""
    state = json.loads((Path(cluster["RAYFLEET_STATE_DIR"]) / "cluster" / "state.json").read_text())
    temp_dir = Path(state["temp_dir"])
    assert temp_dir.parent == local_cluster.temp_root()
    assert any(temp_dir.glob("session_*/logs/raylet.out"))  # Ray's session and logs are in there
    for path in (temp_dir.parent, Path(state["log_dir"])):
        info = path.stat()
        assert (info.st_mode & 0o777, info.st_uid) == (0o700, os.getuid()), path
