"""A real local Ray cluster (head + 2 workers, token auth) and a real moto S3 server, for the session.

Both use their own ports, state directory and token file, so a developer's own `rayfleet cluster up` on the
default ports is left alone. Jobs run as real driver subprocesses (`python -m rayfleet.train.ddp`). What the tests
share besides these fixtures is in helpers.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import partial

import pytest

from rayfleet.core import ray_auth
from tests.integration.fsdp_recipe_run import train_fsdp
from tests.integration.helpers import (
    DASHBOARD_PORT,
    FSDP_LEARN,
    RAY_PORT,
    REPO,
    EcsMotoServer,
    MotoServer,
    run_ddp,
    run_fsdp,
    verbs_env,
)
from tools import tiny_lm
from tools.moto_stack import iam, stack


@pytest.fixture(scope="session")
def cluster_env(tmp_path_factory, aws_stack) -> dict:
    base = tmp_path_factory.mktemp("cluster")
    token = ray_auth.ensure_token(base / "token")
    env = {
        **os.environ,
        "RAYFLEET_STATE_DIR": str(base / "state"),
        "RAYFLEET_RAY_TOKEN_FILE": str(token),
        "RAYFLEET_RAY_PORT": str(RAY_PORT),
        "RAYFLEET_DASHBOARD_PORT": str(DASHBOARD_PORT),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token),
        # The ranks read the bucket as the task role (IAM enforced in aws_stack's moto); the worker nodes read
        # the credentials from their own environment, as ECS's task role credentials reach a container.
        **aws_stack["server"].as_identity("task"),
        "AWS_DEFAULT_REGION": "us-east-1",
        # S3 only (not ECS or CloudWatch): Ray's runtime-env agents fetch a recipe's code zip from the moto
        # bucket the way ECS nodes fetch it from the results bucket. Jobs name their own endpoint otherwise.
        "AWS_ENDPOINT_URL_S3": aws_stack["server"].url,
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("AWS_PROFILE", None)
    cli = [sys.executable, "-m", "rayfleet.cli.main", "cluster"]
    # two workers of 1 CPU, each its own worker group (a, b): the runs that name no group use both as before;
    # tests/integration/test_worker_groups_on_local_cluster.py places work on one group by its label
    shape = ["--group", "a=1", "--group", "b=1", "--cpus-per-worker", "1"]
    subprocess.run([*cli, "up", *shape], env=env, cwd=REPO, check=True)
    try:
        yield {**env, "RAY_ADDRESS": f"127.0.0.1:{RAY_PORT}"}
    finally:
        subprocess.run([*cli, "down"], env=env, cwd=REPO, check=False)


@pytest.fixture
def session_cluster_stopped(cluster_env) -> dict:
    """For the one test that starts a cluster of its own: the session cluster is stopped first (never two
    clusters at once on two cores). tests/conftest.py orders its users after every other local-cluster test;
    cluster_env's own teardown then finds nothing left to stop. Yields the session cluster's environment."""
    cli = [sys.executable, "-m", "rayfleet.cli.main", "cluster", "down"]
    env = {k: v for k, v in cluster_env.items() if k != "RAY_ADDRESS"}
    subprocess.run(cli, env=env, cwd=REPO, check=True, timeout=120)
    return cluster_env


def default_iam() -> iam.Spec:
    """The default deployment's roles, rendered policies and operator (the rendering is cached per process)."""
    return iam.Spec(**stack.default_picture()["iam"])


@pytest.fixture(scope="session")
def moto_endpoint() -> str:
    """A plain moto_server for the session, IAM enforced with the default deployment's identities (no stack:
    its tests make their own resources, in the rendered bucket's name, through MotoServer.inspector)."""
    server = MotoServer().start()
    server.enforce(default_iam())
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def moto() -> MotoServer:
    """A moto server of the test's own, stoppable and restartable, IAM enforced with the default deployment's
    identities (a restart makes them again). Its tests make their own resources through `inspector`; a bucket
    the roles may use has the rendered bucket's name (`rendered_bucket`)."""
    server = MotoServer().start()
    server.enforce(default_iam())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def rendered_bucket() -> str:
    """The results bucket's name as Terraform renders it: the one the rendered S3 statements name."""
    return stack.default_picture()["bucket"]["name"]


@pytest.fixture(scope="session")
def aws_stack(tmp_path_factory):
    """A moto server holding what `rayfleet deploy` creates, as Terraform renders infra/ with its default
    variables (tools/moto_stack/stack.py), IAM enforced with the rendered policies (tools/moto_stack/iam.py),
    and the env that points the verbs at it, as the operator. "outputs": the outputs file's values (moto's
    ids) and its path; "picture": the rendered deployment picture (tools/rendered.py); "roles": the env of
    each identity ("task": a job's, "control": the control task's, "operator"): `{**env, **roles["task"]}`."""
    picture = stack.default_picture()
    server = EcsMotoServer().start()
    try:
        outputs = stack.create(server, tmp_path_factory.mktemp("aws"), picture)
        env = verbs_env(server.url, outputs["outputs_file"], stack.REGION)
        roles = {name: server.as_identity(name) for name in server.identities}
        yield {"server": server, "outputs": outputs, "env": env, "picture": picture, "roles": roles}
    finally:
        server.stop()


@pytest.fixture(scope="session")
def ecs_moto_server() -> EcsMotoServer:
    """One moto with the ECS patches per test process: starting one takes seconds, emptying it a moment. IAM
    is enforced with the default deployment's identities from the start, and again after every reset (a
    stack.create of another shape updates the roles' policies to its own)."""
    server = EcsMotoServer().start()
    server.enforce(default_iam())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def ecs_moto(ecs_moto_server) -> EcsMotoServer:
    """A deployed stack needs moto with registered resources (tools/moto_stack/ecs.py): an empty one of the
    test's own (the session's server, reset: moto forgets every resource, as a new process would)."""
    return ecs_moto_server.reset()


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("tiny-lm")
    text = tiny_lm.corpus()
    (root / "corpus.txt").write_text(text)
    tiny_lm.build(root / "model", text)
    return {"model": str(root / "model"), "data": str(root / "corpus.txt")}


@pytest.fixture(scope="session")
def ddp_basic(cluster_env, small_dataset, tmp_path_factory) -> dict:
    """The DDP job's run "basic": 3 epochs of half the small dataset, 600 test images in one evaluation batch per rank.
    Run once per session: test_ddp_on_local_cluster checks it, the serve tests
    serve it."""
    root = tmp_path_factory.mktemp("ddp-basic")
    args = [f"data_dir={small_dataset}", f"storage={root}", "eval_batch_size=600", "epochs=3", "run_name=basic"]
    args += ["progress_every_s=1", "log_every_steps=5"]  # 10 steps an epoch: progress lines, 2 step losses
    args += ["train_subset=1200", "batch_size=64"]  # still 10 steps an epoch, at half the CPU of the whole set
    return {"result": run_ddp(cluster_env, *args), "storage": root, "args": args}


@pytest.fixture(scope="session")
def fsdp_learned(cluster_env, tiny, tmp_path_factory):
    """The FSDP job's run "learn" for a strategy, once per session: 30 steps, checkpoints every 10, the export;
    stopped after step 10 (stop_at_step) by its first invocation and resumed by a second under the same name.
    FSDP's runs the job directly (`python -m rayfleet.train.fsdp`); DeepSpeed's is `make train-fsdp` on the
    local cluster, twice: the built-in recipe recipes/fsdp-tiny.yaml through the Jobs API, its second
    submission resuming the first's (tests/integration/fsdp_recipe_run.py). test_fsdp_on_local_cluster checks
    the learning, the shards, checkpoints and the resume (against an uninterrupted twin), the serve tests serve
    FSDP's export. "first"/"result": the two invocations."""
    done: dict[str, dict] = {}

    def learned(strategy: str) -> dict:
        if strategy not in done:
            root = tmp_path_factory.mktemp(f"fsdp-{strategy}")
            args = [*FSDP_LEARN, f"strategy={strategy}", "progress_every_s=0.2"]
            if strategy == "fsdp":
                invoke = partial(run_fsdp, cluster_env, tiny, root, *args, "run_name=learn")
            else:
                invoke = partial(train_fsdp, cluster_env, tiny, root, root, "learn", *args)
            first = invoke("stop_at_step=10")
            exported_early = (root / "learn" / "export").exists()
            second = invoke() if first.returncode == 0 else first
            done[strategy] = {"first": first, "result": second, "storage": root, "exported_early": exported_early}
        return done[strategy]

    return learned
