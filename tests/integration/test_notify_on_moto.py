"""Notifications through SNS (a real moto_server): an SQS queue subscribed to the topic, as an e-mail
subscription would be, receives what a watched recipe command says."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def test_a_watched_run_publishes_its_start_and_failure_to_the_topic(moto):
    """The watched command runs in a task, as the task role; the topic and the inbox are the test's own (made
    and read by the inspector)."""
    env = {
        **os.environ,
        **moto.as_identity("task"),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto.url,
    }
    kms = moto.inspector("kms").create_key()["KeyMetadata"]["Arn"]
    sns, sqs = moto.inspector("sns"), moto.inspector("sqs")
    topic = sns.create_topic(Name="rayfleet-notifications", Attributes={"KmsMasterKeyId": kms})["TopicArn"]
    queue = sqs.create_queue(QueueName="inbox")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)
    env.update(
        RAYFLEET_NOTIFY=json.dumps({"run": "ddp-9", "stall_after_s": 0}),
        RAYFLEET_NOTIFY_TOPIC_ARN=topic,
    )
    command = f"{sys.executable} -c \"print('epoch 1'); raise SystemExit('out of memory')\""
    result = subprocess.run(
        [sys.executable, "-m", "rayfleet.recipes.job_entry", command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1 and "epoch 1" in result.stdout
    bodies = []
    while len(bodies) < 2:
        received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", [])
        assert received, f"the queue got {len(bodies)} of 2 messages"
        bodies += [json.loads(m["Body"]) for m in received]
    assert [(b["Subject"], b["TopicArn"]) for b in bodies] == [
        ("rayfleet: run ddp-9 started", topic),
        ("rayfleet: run ddp-9 failed", topic),
    ]
    assert bodies[1]["Message"].endswith("exit code 1; the last lines:\nepoch 1\nout of memory")
