"""Recipe secrets never reach Ray: not its logs, not its session files, not the Jobs API (issue 15, item 3).

A recipe run on the real local cluster with three secrets, one from each source: Secrets Manager and SSM
(served by moto) and the submitter's own environment. The job writes the sha256 of each value it sees, so
the test knows the values arrived; then every file of the cluster's Ray temp directory (session logs,
runtime_env_agent.log, GCS files, sockets skipped) and of its state directory, and the Jobs API's answers
(job info, job list, job logs) are searched for the values: none may hold one.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, jobs_api_call

pytestmark = pytest.mark.integration

NAMES = ("SM_TOKEN", "SSM_TOKEN", "ENV_TOKEN")
PROBE = textwrap.dedent("""
    import hashlib, json, os
    import ray

    NAMES = ("SM_TOKEN", "SSM_TOKEN", "ENV_TOKEN")

    def seen():
        return {n: hashlib.sha256(os.environ[n].encode()).hexdigest() if n in os.environ else None for n in NAMES}

    @ray.remote(num_cpus=1)
    def on_a_worker(resolve):
        if resolve:  # a Ray task or Train worker resolves the references itself, with its own credentials
            from rayfleet.recipes.job_entry import load_secrets
            load_secrets()
        return seen()

    driver = seen()
    ray.init()
    result = {"driver": driver, "worker": ray.get(on_a_worker.remote(False)),
              "worker_resolved": ray.get(on_a_worker.remote(True)),
              "refs": json.loads(os.environ.get("RAYFLEET_SECRET_REFS", "{}"))}
    with open(os.path.join(os.environ["RAYFLEET_RUN_DIR"], "seen.json"), "w") as f:
        json.dump(result, f)
    print("probe done")
""")


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def files_holding(root: Path, needles: dict[str, bytes]) -> list[str]:
    """'<file>: <name>' for every regular file under root that contains one of the values."""
    found = []
    for path in root.rglob("*"):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found += [f"{path}: {name}" for name, needle in needles.items() if needle in data]
    return found


def test_secret_values_reach_the_job_but_never_ray(cluster_env, aws_stack, tmp_path, monkeypatch):
    server = aws_stack["server"]
    tag = uuid.uuid4().hex
    values = {"SM_TOKEN": f"sm-{tag}", "SSM_TOKEN": f"ssm-{tag}", "ENV_TOKEN": f"env-{tag}"}
    server.client("secretsmanager").create_secret(Name=f"rayfleet/recipes/probe-{tag}", SecretString=values["SM_TOKEN"])
    server.client("ssm").put_parameter(
        Name=f"/rayfleet/recipes/probe-{tag}", Value=values["SSM_TOKEN"], Type="SecureString"
    )
    endpoints = {"AWS_ENDPOINT_URL_SECRETS_MANAGER": server.url, "AWS_ENDPOINT_URL_SSM": server.url}
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBE)
    storage = tmp_path / "runs"
    recipe = {
        "name": "secrets-probe",
        "code": "code",
        "entrypoint": "probe.py",
        "env": {
            **endpoints,  # where the job's process finds moto; not secret
            "SM_TOKEN": {"secret": f"secretsmanager:rayfleet/recipes/probe-{tag}"},
            "SSM_TOKEN": {"secret": f"ssm:/rayfleet/recipes/probe-{tag}"},
            "ENV_TOKEN": {"secret": "env:PROBE_ENV_TOKEN"},
        },
        "resources": {"workers": 1, "cpus_per_worker": 1},
        "storage": str(storage),
    }
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    result = subprocess.run(
        [
            str(REPO / ".venv/bin/python"),
            "-m",
            "rayfleet.cli.main",
            "run",
            str(tmp_path / "recipe.yaml"),
            "--on",
            "local",
            "--name",
            f"probe-{tag[:8]}",
        ],
        env={**cluster_env, **endpoints, "PROBE_ENV_TOKEN": values["ENV_TOKEN"]},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    needles = {name: value.encode() for name, value in values.items()}

    # Ray's files: the session directory of every node (logs, runtime_env_agent.log, GCS), and the
    # cluster's own state and log directory.
    monkeypatch.setenv("RAYFLEET_STATE_DIR", cluster_env["RAYFLEET_STATE_DIR"])
    from rayfleet.local import cluster as local_cluster

    state = local_cluster.running()
    assert state is not None
    leaks = files_holding(Path(state.temp_dir), needles) + files_holding(
        Path(cluster_env["RAYFLEET_STATE_DIR"]), needles
    )

    # The Jobs API's answers, as any token holder gets them.
    job_id = json.loads((storage / f"probe-{tag[:8]}" / "run.json").read_text())["job_id"]
    answers = {
        "job info": jobs_api_call(cluster_env, "get_job_info", job_id),
        "job list": jobs_api_call(cluster_env, "list_jobs"),
        "job logs": jobs_api_call(cluster_env, "get_job_logs", job_id),
    }
    leaks += [f"Jobs API {what}: {name}" for what, text in answers.items() for name, v in values.items() if v in text]
    # and what the submitter printed and wrote
    leaks += [f"rayfleet run output: {name}" for name, v in values.items() if v in result.stdout + result.stderr]
    leaks += files_holding(storage, {n: v for n, v in needles.items()})

    assert not leaks, "secret values found:\n  " + "\n  ".join(leaks)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    seen = json.loads((storage / f"probe-{tag[:8]}" / "seen.json").read_text())
    # The job's own process got every value ...
    assert seen["driver"] == {name: sha(value) for name, value in values.items()}
    # ... Ray's other processes got the references only, and can resolve them themselves.
    assert seen["worker"] == dict.fromkeys(NAMES)
    assert seen["worker_resolved"] == {name: sha(value) for name, value in values.items()}
    assert seen["refs"]["SM_TOKEN"] == f"secretsmanager:rayfleet/recipes/probe-{tag}"
    env_ref = seen["refs"]["ENV_TOKEN"]  # env: values travel as a private file on this machine, removed after
    assert env_ref.startswith("file:") and not Path(env_ref.removeprefix("file:")).exists()
