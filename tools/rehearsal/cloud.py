"""The rehearsal's AWS: a moto server in a process of its own, holding what `make deploy` would have created (the one
moto stack, tools/moto_stack/, creates it).

moto serves ECS, S3, Secrets Manager, CloudWatch Logs, CloudWatch, Cloud Map and EC2 on one port, bound to
loopback and to the rehearsal network's gateway address, through which the containers reach it. It runs in a child
process (tools/rehearsal/moto_process.py: served from threads of the rehearsal's own process, it shared one GIL
with the log shipping and the agent, and a container's S3 request timed out waiting on it), which dies with
the rehearsal. The agent records what moto's API has no call for through `Moto`'s record_* below, a route of
that process only the rehearsal holds the key to (the ECS agent records them with SubmitTaskStateChange /
SubmitContainerStateChange, which moto does not implement):

  * a stopped task's container exit codes and last status (moto reports exitCode 0 for every container);
  * a service's runningCount and pendingCount (moto sets runningCount = desiredCount on UpdateService);
  (a container instance's registered CPU, memory and GPUs, and placement constraints, come from the one moto
  stack's ECS patches, tools/moto_stack/ecs.py, applied in moto's process).

Nothing else reaches into moto: the rest goes through the same APIs the laptop verbs use.

IAM is enforced as in the moto tier, by the one fixture (tools/moto_stack/iam.py: the rendered roles and
policies through its one `for_moto` transformation; /moto-api/reset-auth switches moto's enforcement, a
setting of moto's process that its threaded servers all read). Who calls as whom:
  * the laptop verbs: the operator (infra/operator-policy.json), its keys in the state file (`env`);
  * each container: its task definition's taskRoleArn (the agent hands it the role's session keys);
  * the secrets a task definition names: its executionRoleArn, as the ECS agent fetches them;
  * the rest of the rehearsal itself (`Moto.client`: the agent's ECS scheduling, the log shipper, the
    rehearsal's own look at the cluster): the allow-all `inspector`, because it plays ECS and CloudWatch
    themselves, which act with the service's rights, not a role of the deployment.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
from botocore.config import Config

from tools.moto_stack import iam
from tools.rehearsal import moto_process

ACCOUNT = moto_process.ACCOUNT
# Until the identities exist (stack.create makes the deployment with enforcement off, as Terraform's apply).
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
# Every process that signs for this moto (containers, verbs) sends bodies uncompressed: moto checks a signature
# over the body it decompressed, so botocore's gzip of a large PutMetricData (the GPU sidecar) never matches.
SIGNED_PLAIN = {"AWS_DISABLE_REQUEST_COMPRESSION": "true"}


IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)  # Linux: bind an address its interface does not have yet


def listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; EADDRINUSE (OSError) when the port is taken there."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if host != "127.0.0.1":
        # The podman network's bridge, which carries its gateway address, exists only while a container is
        # attached to it: the socket is bound before, and accepts once the bridge is up.
        sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
    try:
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class Moto:
    """moto_server's app, served by a process of its own (tools/rehearsal/moto_process.py) on 127.0.0.1:<port>
    and, for the containers, on the podman network's gateway address (the host's end of the rehearsal's own
    bridge), never on every interface: moto checks no credentials, and the agent runs what moto holds. This
    process binds the sockets (a port taken is its error to say) and hands them over."""

    def __init__(self, port: int = 0, gateway: str | None = None):
        sockets = [listen("127.0.0.1", port)]
        try:
            self.port = sockets[0].getsockname()[1]
            if gateway:
                sockets.append(listen(gateway, self.port))
            self.hosts = [sock.getsockname()[0] for sock in sockets]
            self._key = secrets.token_hex(32)
            fds = [sock.fileno() for sock in sockets]
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tools.rehearsal.moto_process", *map(str, fds)],
                pass_fds=fds,
                env={**os.environ, moto_process.KEY_ENV: self._key},
                preexec_fn=_die_with_parent,  # a rehearsal killed outright leaves no moto running
            )
        finally:
            for sock in sockets:
                sock.close()  # the moto process holds them now
        self._wait_until_serving()
        self.region = "us-east-1"
        self._clients: dict[tuple, object] = {}
        self.identities: dict[str, iam.Identity] = {}  # set by iam.enforce (stack.create)
        self.places_like_ecs = True  # moto_process applies tools/moto_stack/ecs.py's patches

    def _wait_until_serving(self) -> None:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/moto-api/", timeout=5).close()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"moto did not start (exit code {self.process.returncode})") from None
                time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, service: str, identity: str = "inspector"):
        """A client of this moto: as `identity` once IAM is enforced (the inspector by default: the rehearsal
        plays ECS and CloudWatch themselves), with the test keys before (stack.create, as Terraform's apply)."""
        found = self.identities.get(identity)
        if self.identities and found is None:
            raise KeyError(f"no identity {identity!r} in the rehearsal's moto")
        credentials = (
            found.client_kwargs()
            if found
            else {
                "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
                "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            }
        )
        key = (service, credentials["aws_access_key_id"], self.region)
        if key not in self._clients:
            self._clients[key] = boto3.client(
                service,
                endpoint_url=self.url,
                region_name=self.region,
                **credentials,
                # moto checks a signature over the body it decompressed (SIGNED_PLAIN)
                config=Config(retries={"mode": "standard", "max_attempts": 3}, disable_request_compression=True),
            )
        return self._clients[key]

    def credentials_of(self, identity: str) -> dict[str, str]:
        """The AWS_* keys that make a process (a container, a laptop verb) `identity` (see SIGNED_PLAIN too)."""
        return self.identities[identity].env()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)

    # -- what moto's API cannot record (see the module docstring) -----------------------------------------
    def _record(self, what: str, cluster: str, arn: str, **fields) -> None:
        body = json.dumps({"region": self.region, "what": what, "cluster": cluster, "arn": arn, **fields}).encode()
        request = urllib.request.Request(
            f"{self.url}{moto_process.RECORD_PATH}",
            data=body,
            headers={"Content-Type": "application/json", moto_process.KEY_HEADER: self._key},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=30).close()

    def record_exit(self, cluster: str, task_arn: str, exit_code: int | None) -> None:
        self._record("exit", cluster, task_arn, exit_code=exit_code)

    def record_pending(self, cluster: str, task_arn: str) -> None:
        """moto starts a task RUNNING at RunTask; ECS says PENDING until its containers have started."""
        self._record("pending", cluster, task_arn)

    def record_running(self, cluster: str, task_arn: str, health: str) -> None:
        self._record("running", cluster, task_arn, health=health)

    def record_service(self, cluster: str, service: str, running: int, pending: int) -> None:
        self._record("service", cluster, service, running=running, pending=pending)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def deploy(moto: Moto, picture: dict, directory: Path) -> dict:
    """Create the picture in moto with the one moto stack (tools/moto_stack/stack.py), as `make deploy` would in
    AWS, without starting the services' tasks (the agent schedules them). Writes directory/outputs.json.
    Returns what the agent and the verbs need: {"outputs", "outputs_file", "services", "task_definitions",
    "cluster", "token", "secret_arn", "gcs_store_token", "ids"}."""
    from tools.moto_stack import stack
    from tools.moto_stack.stack import mapped

    moto.region = picture.get("region", moto.region)
    # The head group's instances have room for one trainer beside the head, as Terraform sizes them. IAM is
    # enforced as in the moto tier (the module docstring): stack.create makes the identities and sets
    # moto.identities; from here on `moto.client` is the inspector.
    created = stack.create(moto, directory, picture, trainer_slots=1, start_services=False, enforce_iam=True)
    ids = created["ids"]
    outputs_file = Path(created["outputs_file"])
    document = json.loads(outputs_file.read_text())
    document["ecr_repository_urls"] = {"value": {}, "sensitive": False}  # nothing to push to: local images
    outputs_file.write_text(json.dumps(document, indent=1))
    services = {
        service["serviceName"]: {
            "task_definition": service["taskDefinition"],
            "dns_names": [f"{r['service']}.{r['namespace']}" for r in service.get("serviceRegistries", [])],
            "network": mapped(service.get("networkConfiguration"), ids),
            "placement": mapped(service.get("placementConstraints") or [], ids),
        }
        for service in picture["services"]
    }
    outputs = {k: v["value"] for k, v in document.items()}
    return {
        "outputs": outputs,
        "outputs_file": str(outputs_file),
        "services": services,
        "task_definitions": created["task_definitions"],
        "cluster": created["cluster"],
        "token": created["token"],
        "secret_arn": outputs.get("ray_token_secret_arn"),
        "gcs_store_token": created["gcs_store_token"],  # None without a store
        "ids": created["ids"],  # rendered id -> moto's: what a later apply maps its picture with (reapply.py)
    }
