"""The rehearsal's AWS is the one moto stack (tools/moto_stack): the same rendered deployment the integration
tests use, made in the rehearsal's in-process moto with the same ECS patches, without service tasks (its
agent schedules those). The containers themselves: tests/integration/test_rehearsal.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.rehearsal.cloud import Moto, deploy
from tools.rehearsal.picture import deployment_picture


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    moto = Moto(0)
    try:
        yield moto, deploy(moto, deployment_picture(), tmp_path_factory.mktemp("rehearsal"))
    finally:
        moto.stop()


def test_the_stack_is_created_without_service_tasks_and_the_outputs_point_at_local_images(deployed):
    moto, out = deployed
    ecs = moto.client("ecs")
    assert not ecs.list_tasks(cluster=out["cluster"])["taskArns"]  # the agent starts them
    written = json.loads(Path(out["outputs_file"]).read_text())
    assert written["ecr_repository_urls"]["value"] == {} and written["cluster_name"]["value"] == out["cluster"]
    assert out["token"] and out["secret_arn"].startswith("arn:aws:secretsmanager:")
    assert set(out["task_definitions"]) >= {"head", "worker", "trainer"}


def test_service_tasks_land_on_their_node_group_with_the_patched_placement(deployed):
    moto, out = deployed
    ecs = moto.client("ecs")
    groups = {}
    for arn in ecs.list_container_instances(cluster=out["cluster"])["containerInstanceArns"]:
        described = ecs.describe_container_instances(cluster=out["cluster"], containerInstances=[arn])
        attributes = {a["name"]: a.get("value") for a in described["containerInstances"][0]["attributes"]}
        groups[arn] = attributes.get("rayfleet.node-group")
    for name, info in out["services"].items():
        service = ecs.describe_services(cluster=out["cluster"], services=[name])["services"][0]
        started = ecs.run_task(
            cluster=out["cluster"],
            taskDefinition=service["taskDefinition"],
            group=f"service:{name}",
            networkConfiguration=info["network"],
            placementConstraints=info["placement"],
        )
        assert len(started["tasks"]) == 1, started["failures"]
        wanted = [c["expression"].split("==")[1].strip() for c in info["placement"] if c["type"] == "memberOf"]
        assert [groups[started["tasks"][0]["containerInstanceArn"]]] == wanted or not wanted


def test_iam_is_enforced_with_the_rendered_roles(deployed):
    """The rehearsal's moto enforces IAM as the moto tier does (tools/moto_stack/iam.py): the test keys it was
    made with are refused from then on, the containers' task role may write runs/ but not staged/ (issue 54
    R1), the execution role reads the token secret as the ECS agent does, and the verbs' keys are the operator's."""
    import botocore.exceptions

    moto, out = deployed
    bucket = out["outputs"]["results_bucket"]
    test_keys = boto3_client(moto, "s3", {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
    with pytest.raises(botocore.exceptions.ClientError, match=r"InvalidAccessKeyId|AccessDenied|InvalidClientTokenId"):
        test_keys.list_objects_v2(Bucket=bucket)
    task = boto3_client(moto, "s3", moto.credentials_of("task"))
    task.put_object(Bucket=bucket, Key="runs/r1/metrics.jsonl", Body=b"{}")
    with pytest.raises(botocore.exceptions.ClientError, match="AccessDenied"):
        task.put_object(Bucket=bucket, Key="staged/0123/manifest.json", Body=b"{}")
    # HeadBucket (Ray Train's storage asks it) is judged as s3:ListBucket, as AWS judges it, not "s3:HeadBucket"
    task.head_bucket(Bucket=bucket)
    execution = moto.client("secretsmanager", "execution")
    assert execution.get_secret_value(SecretId=out["secret_arn"])["SecretString"] == out["token"]
    assert set(moto.credentials_of("operator")) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}


def boto3_client(moto, service: str, env: dict):
    import boto3

    return boto3.client(
        service,
        endpoint_url=moto.url,
        region_name=moto.region,
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=env.get("AWS_SESSION_TOKEN"),
    )
