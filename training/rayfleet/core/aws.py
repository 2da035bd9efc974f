"""The one small AWS adapter: a session, clients with retries, typed errors, one exit path.

Region and credentials come from the standard AWS chain (environment, profile, SSO, instance role); the
Terraform outputs may name the region. Every verb's `main` runs through `run_cli`, which turns the errors
below (and botocore's) into one line on stderr and exit code 1 (2 for a ConfigError), with no traceback.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

from rayfleet.core.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED, ConfigError, RayfleetError

# ECS RunTask's startedBy of the trainer tasks the launch verb starts: how the verbs, the head's autostop and
# the rehearsal tell trainers from service tasks.
STARTED_BY = "rayfleet"
# boto3 and botocore's config and parsers are imported where a client is made or an answer fails, not here: they
# cost 0.15 s of CPU, and every process that imports this module for its errors (a recipe job's entry, the
# command line) would pay it before doing anything.
RETRIES = {"retries": {"mode": "standard", "max_attempts": 5}, "connect_timeout": 5, "read_timeout": 30}


class MissingOutputs(RayfleetError):
    pass


class NoCredentials(RayfleetError):
    pass


class TokenExpired(RayfleetError):
    pass


class ClusterNotFound(RayfleetError):
    pass


class PlacementFailed(RayfleetError):
    """ECS placed no task; `request` is the RunTask that failed, `slots_full` whether it was for want of the
    head instance's driver shares (rayfleet/ecs/launch.py)."""

    def __init__(self, message: str, request: dict | None = None, slots_full: bool = False):
        super().__init__(message)
        self.request, self.slots_full = request, slots_full


class PluginMissing(RayfleetError):
    pass


class AwsCallFailed(RayfleetError):
    pass


class Aws:
    def __init__(self, region: str | None = None):
        import boto3

        self.session = boto3.Session(region_name=region)
        self.region = self.session.region_name
        if not self.region:
            raise RayfleetError("no AWS region: set AWS_REGION or AWS_DEFAULT_REGION (or deploy, which records it)")
        self._clients: dict[str, object] = {}

    def client(self, service: str, endpoint_url: str | None = None, attempts: int | None = None):
        """A client with retries; `endpoint_url` for an S3-compatible store (else the chain's AWS_ENDPOINT_URL);
        `attempts` fewer for a call whose failure is only noted (a preflight's optional checks)."""
        key = service if endpoint_url is None and attempts is None else f"{service}@{endpoint_url}@{attempts}"
        if key not in self._clients:
            from botocore.config import Config

            config = Config(**RETRIES)
            config = config if attempts is None else config.merge(Config(retries={"max_attempts": attempts}))
            self._clients[key] = self.session.client(service, config=config, endpoint_url=endpoint_url)
        return self._clients[key]

    def check_cluster(self, cluster: str) -> dict:
        found = self.client("ecs").describe_clusters(clusters=[cluster])
        clusters = [c for c in found.get("clusters", []) if c.get("status") == "ACTIVE"]
        if not clusters:
            raise ClusterNotFound(f"ECS cluster {cluster} does not exist in {self.region}; run `rayfleet deploy`")
        return clusters[0]


# What a client's identity and endpoint come from besides its arguments: a client made under other values of
# these (a test's moto, another profile) is another client.
_CHAIN = (
    "AWS_PROFILE",
    "AWS_ACCESS_KEY_ID",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
)
_shared: dict[tuple, object] = {}
_shared_lock = threading.Lock()


def shared_client(service: str, region: str | None = None, endpoint_url: str | None = None):
    """One client per service, region, endpoint and credential chain for the whole process. Making a client
    loads botocore's service model (0.5-1 s of CPU): code that calls S3 many times in a run (the run record,
    its events, the queue) must not make one per call. Clients are thread-safe; sessions are not, hence the
    lock around making one."""
    key = (service, region, endpoint_url, *(os.environ.get(name) for name in _CHAIN))
    with _shared_lock:
        if key not in _shared:
            _shared[key] = Aws(region).client(service, endpoint_url=endpoint_url)
        return _shared[key]


def translate(exc: Exception) -> RayfleetError:
    from botocore.parsers import ResponseParserError

    if isinstance(exc, RayfleetError):
        return exc
    if isinstance(exc, NoCredentialsError):
        return NoCredentials("no AWS credentials found: run `aws configure` or `aws sso login`, or set AWS_PROFILE")
    if isinstance(exc, EndpointConnectionError):
        return AwsCallFailed(f"cannot reach AWS ({exc}); check the network and AWS_REGION")
    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        message = " ".join(str(exc.response.get("Error", {}).get("Message", "")).split())  # one line, always
        if message.startswith("<"):  # an HTML error page from a proxy or endpoint, not an AWS error
            message = "the endpoint answered with an HTML error page"
        message = message[:300]
        if code in {"ExpiredToken", "ExpiredTokenException", "RequestExpired", "TokenRefreshRequired"}:
            return TokenExpired("the AWS credentials have expired: run `aws sso login` (or renew them) and retry")
        if code == "ClusterNotFoundException":
            return ClusterNotFound("the ECS cluster does not exist: run `rayfleet deploy`")
        if code in {"AccessDeniedException", "AccessDenied", "UnauthorizedOperation"}:
            return AwsCallFailed(f"AWS denied {exc.operation_name}: {message}")
        return AwsCallFailed(f"{exc.operation_name} failed: {code}: {message}")
    if isinstance(exc, ResponseParserError):  # an endpoint (a proxy, a stand-in) that does not speak the API
        return AwsCallFailed("the endpoint answered something that is not an AWS response")
    return AwsCallFailed(f"{type(exc).__name__}: {exc}")


def run_cli(main: Callable[[list[str] | None], int], argv: list[str] | None = None) -> int:
    try:
        return main(argv)
    except ConfigError as exc:  # refused before doing anything
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (RayfleetError, BotoCoreError, ClientError) as exc:
        print(f"error: {translate(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
