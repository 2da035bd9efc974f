"""`make train-ddp` and `make train-fsdp` on ECS, with IAM enforced (tools/moto_stack/iam.py), up to the ranks
reading their staged data: the operator stages the recipe's `data:` (rayfleet/recipes/stage.py, as `rayfleet run`
does before RunTask), then a process holding only the task role's credentials reads it as a rank does
(rayfleet/train/data/staged.py local_copy for DDP's folder, text.py read_text for FSDP's corpus). The data is
a small generated stand-in of the real format. And a job that reaches outside its role's prefixes is refused.

The harness's one-group deployment is the session's aws_stack; infra/'s default (ddp and fsdp groups) a moto
of this module's own. No Ray: what only a real rank adds (Ray Train, the GPUs) is the rehearsal's and the local
cluster's.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from botocore.exceptions import ClientError

from rayfleet.core.config import load_yaml
from rayfleet.train.data import synthetic
from tests.integration.helpers import REPO, EcsMotoServer, verbs_env
from tools.moto_stack import stack

pytestmark = pytest.mark.integration

STAGE = """
import sys
from pathlib import Path
from rayfleet.recipes.stage import stage
print("URL=" + stage(Path(sys.argv[1]), sys.argv[2], "us-east-1"))
"""
# As rayfleet/train/ddp/__init__.py and fsdp.py read their data on every rank.
READ_DDP = """
import sys
from rayfleet.train.data import fashion_mnist, staged
root = staged.local_copy(sys.argv[1])
print("IMAGES=%d" % len(fashion_mnist.load(root, train=True)))
"""
READ_FSDP = """
import sys
from rayfleet.train.data.text import read_text
print("CHARS=%d" % len(read_text(sys.argv[1])))
"""
CORPUS = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20


def python(env: dict, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )


def recipe(name: str) -> dict:
    return load_yaml((REPO / "recipes" / f"{name}.yaml").read_text())


def staged_by_the_operator(deployment: dict, folder) -> str:
    bucket = deployment["outputs"]["results_bucket"]
    done = python(deployment["env"], STAGE, str(folder), f"s3://{bucket}/runs")
    assert done.returncode == 0, done.stderr[-3000:]
    return re.search(r"^URL=(\S+)$", done.stdout, re.M)[1]


def as_a_rank(deployment: dict, tmp_path) -> dict:
    """A rank's environment: the task role's credentials and nothing of the operator's, its own node cache."""
    return {**deployment["env"], **deployment["roles"]["task"], "RAYFLEET_DATA_CACHE": str(tmp_path / "node")}


@pytest.fixture(scope="module")
def fsdp_stack(tmp_path_factory):
    """infra/'s default deployment (its fsdp group with EFA beside ddp), IAM enforced, in a moto of this module's
    own."""
    picture = stack.default_picture(var_files=())
    server = EcsMotoServer().start()
    try:
        outputs = stack.create(server, tmp_path_factory.mktemp("fsdp-aws"), picture, trainer_slots=1)
        env = verbs_env(server.url, outputs["outputs_file"], stack.REGION)
        roles = {name: server.as_identity(name) for name in server.identities}
        yield {"server": server, "outputs": outputs, "env": env, "picture": picture, "roles": roles}
    finally:
        server.stop()


def test_train_ddp_data_staged_by_the_operator_is_read_by_the_ranks_task_role(aws_stack, tmp_path):
    assert recipe("ddp")["data"] == "../data"  # the folder `make data` writes, in torchvision's layout
    data = tmp_path / "data"
    synthetic.generate(data, train=10, test=10)
    url = staged_by_the_operator(aws_stack, data)
    read = python(as_a_rank(aws_stack, tmp_path), READ_DDP, url)
    assert read.returncode == 0, read.stderr[-3000:]
    assert "IMAGES=10" in read.stdout


def test_train_fsdp_corpus_staged_by_the_operator_is_read_by_the_ranks_task_role(fsdp_stack, tmp_path):
    fsdp = recipe("fsdp")
    assert fsdp["data"] == "../data/text"
    file = next(a for a in fsdp["args"] if a.startswith("data=${RAYFLEET_DATA}/")).split("/", 1)[1]
    (tmp_path / "text").mkdir()
    (tmp_path / "text" / file).write_text(CORPUS)
    url = staged_by_the_operator(fsdp_stack, tmp_path / "text")
    read = python(as_a_rank(fsdp_stack, tmp_path), READ_FSDP, f"{url}/{file}")
    assert read.returncode == 0, read.stderr[-3000:]
    assert f"CHARS={len(CORPUS)}" in read.stdout


@pytest.mark.parametrize(
    "what",
    [
        "writes the head's snapshot under cluster/",
        "writes under staged/, where another run trusts the content by its hash",
        "reads the control task's cluster/",
        "writes outside every prefix",
    ],
)
def test_a_job_outside_its_roles_prefixes_is_refused(aws_stack, what):
    s3 = aws_stack["server"].client_as("s3", "task")
    bucket = aws_stack["outputs"]["results_bucket"]
    calls = {
        "writes the head's snapshot under cluster/": lambda: s3.put_object(
            Bucket=bucket, Key="cluster/x.json", Body=b"{}"
        ),
        "writes under staged/, where another run trusts the content by its hash": lambda: s3.put_object(
            Bucket=bucket, Key="staged/" + "0" * 64 + "/MANIFEST", Body=b"{}"
        ),
        "reads the control task's cluster/": lambda: s3.get_object(Bucket=bucket, Key="cluster/snapshot.json"),
        "writes outside every prefix": lambda: s3.put_object(Bucket=bucket, Key="elsewhere.txt", Body=b"x"),
    }
    with pytest.raises(ClientError) as refused:
        calls[what]()
    assert refused.value.response["Error"]["Code"] == "AccessDenied"


def test_a_job_may_not_touch_the_deployment(aws_stack):
    """The task role has no ECS action: scaling the services is the control task's and the operator's."""
    cluster = aws_stack["outputs"]["cluster_name"]
    workers = next(s["serviceName"] for s in aws_stack["picture"]["services"] if s["serviceName"].endswith("worker"))
    ecs = aws_stack["server"].client_as("ecs", "task")
    with pytest.raises(ClientError) as refused:
        ecs.update_service(cluster=cluster, service=workers, desiredCount=0)
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    control = aws_stack["server"].client_as("ecs", "control")
    assert control.describe_services(cluster=cluster, services=[workers])["services"][0]["serviceName"] == workers
