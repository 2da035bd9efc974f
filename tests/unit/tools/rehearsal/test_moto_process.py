"""The rehearsal's moto answers the containers whatever the rehearsal's own process is doing.

Seen in fresh-clone CI: Ray Train's controller failed a run writing its snapshot to the rehearsal's S3
("CreateMultipartUpload ... curlCode: 28, Timeout was reached"). moto was served from threads of the
rehearsal's own process, which also ships every container's log through boto3, polls podman and runs the
agent: one GIL for all of it. Measured (2 cores): 24 writers of pyarrow, five small files each, took 0.23 s a
file (p50) against an idle rehearsal process and 10.2 s (p50, 22.9 s at most) once ten log-shipper threads and
four Python loops ran beside moto; a write to a server that answers nothing fails exactly so (curl's low-speed
limit, `request_timeout`), as does a connect to one whose accept queue is full (`connect_timeout`).
Now moto is a process of its own (tools/rehearsal/moto_process.py): here the rehearsal's process holds its
GIL outright (a C call made through ctypes.PyDLL keeps it) while a pyarrow client writes as Ray Train does."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tools.rehearsal import moto_process
from tools.rehearsal.cloud import Moto

BUCKET = "rehearsal-gil"
# Ray Train's snapshot write, with a deadline of its own (one attempt, 20 s without a byte) so that a moto that
# cannot answer fails it in 20 s, not after the SDK's retries of rayfleet's 60 s.
WRITE = f"""
import sys
import pyarrow.fs as pafs
from urllib.parse import urlparse
url = urlparse(sys.argv[1])
fs = pafs.S3FileSystem(endpoint_override=url.netloc, scheme=url.scheme, region="us-east-1", access_key="testing",
    secret_key="testing", connect_timeout=20, request_timeout=20,
    retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
with fs.open_output_stream("{BUCKET}/runs/r/checkpoint_manager_snapshot.json") as out:
    out.write(b"{{}}")
print("written")
"""


def test_moto_answers_a_snapshot_write_while_the_rehearsals_process_holds_its_gil(tmp_path):
    moto = Moto(0)
    try:
        moto.client("s3").create_bucket(Bucket=BUCKET)
        output = tmp_path / "client.out"
        with output.open("w") as out:
            client = subprocess.Popen([sys.executable, "-c", WRITE, moto.url], stdout=out, stderr=subprocess.STDOUT)
        status = ctypes.c_int()
        # waitpid through PyDLL: the call keeps the GIL until the client exits, so no other thread of this
        # process runs meanwhile (a busy rehearsal process, at its limit).
        assert ctypes.PyDLL(None).waitpid(client.pid, ctypes.byref(status), 0) == client.pid
        client.returncode = os.waitstatus_to_exitcode(status.value)
        assert client.returncode == 0 and output.read_text().strip().endswith("written"), output.read_text()
        body = moto.client("s3").get_object(Bucket=BUCKET, Key="runs/r/checkpoint_manager_snapshot.json")["Body"]
        assert body.read() == b"{}"
    finally:
        moto.stop()


def test_what_moto_cannot_record_reaches_its_process_only_with_the_rehearsals_key():
    """The agent's writes into moto's ECS backend (a task's status and health, a stopped task's exit code) go
    over moto's own port, which the containers reach too: without the rehearsal's key they are refused."""
    moto = Moto(0)
    try:
        ecs = moto.client("ecs")
        cluster = ecs.create_cluster(clusterName="c")["cluster"]["clusterName"]
        definition = ecs.register_task_definition(
            family="f", containerDefinitions=[{"name": "x", "image": "i", "memory": 64}]
        )["taskDefinition"]["taskDefinitionArn"]
        ec2 = moto.client("ec2")
        image = ec2.describe_images()["Images"][0]["ImageId"]
        instance = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]
        document = json.dumps({"instanceId": instance["InstanceId"]})
        ecs.register_container_instance(cluster=cluster, instanceIdentityDocument=document)
        (task,) = ecs.run_task(cluster=cluster, taskDefinition=definition)["tasks"]
        moto.record_running(cluster, task["taskArn"], "HEALTHY")
        (seen,) = ecs.describe_tasks(cluster=cluster, tasks=[task["taskArn"]])["tasks"]
        assert (seen["lastStatus"], seen["healthStatus"]) == ("RUNNING", "HEALTHY")
        moto.record_exit(cluster, task["taskArn"], 137)
        (seen,) = ecs.describe_tasks(cluster=cluster, tasks=[task["taskArn"]])["tasks"]
        assert seen["containers"][0]["exitCode"] == 137
        body = json.dumps({"region": moto.region, "what": "exit", "cluster": cluster, "arn": task["taskArn"]})
        for headers in ({}, {moto_process.KEY_HEADER: "0" * 64}):
            request = urllib.request.Request(
                f"{moto.url}{moto_process.RECORD_PATH}", data=body.encode(), headers=headers, method="POST"
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 403
    finally:
        moto.stop()
