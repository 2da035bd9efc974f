"""Which images a recipe may run on ECS, checked against a real ECR endpoint (moto_server)."""

from __future__ import annotations

import pytest

from rayfleet.core.aws import Aws
from rayfleet.core.errors import ConfigError
from rayfleet.ecs import image_policy

pytestmark = pytest.mark.integration

ACCOUNT = "123456789012"
REGISTRY = f"{ACCOUNT}.dkr.ecr.us-east-1.amazonaws.com"
DIGEST = "@sha256:" + "ab" * 32


@pytest.fixture
def ecr(moto, monkeypatch):
    # `rayfleet run` checks a recipe's image on the laptop: as the operator (IAM enforced)
    for key, value in {"AWS_ENDPOINT_URL": moto.url, **moto.as_identity("operator")}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv(image_policy.ALLOW_ENV, raising=False)
    client = moto.client("ecr")
    client.create_repository(repositoryName="team/trainer", imageTagMutability="IMMUTABLE")
    client.create_repository(repositoryName="scratch", imageTagMutability="MUTABLE")
    return Aws("us-east-1")


@pytest.mark.parametrize(
    "image", [f"{REGISTRY}/team/trainer:v7", f"{REGISTRY}/team/trainer{DIGEST}", f"{REGISTRY}/scratch{DIGEST}"]
)
def test_accepted(ecr, image):
    image_policy.check(ecr, ACCOUNT, image)


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (f"{REGISTRY}/scratch:latest", "tags in scratch are mutable"),
        (f"{REGISTRY}/team/trainer", "names no tag or digest"),
        (f"{REGISTRY}/nope:v1", "repository nope does not exist"),
        (f"999999999999.dkr.ecr.us-east-1.amazonaws.com/team/trainer{DIGEST}", "not in this deployment's ECR"),
        (f"{ACCOUNT}.dkr.ecr.eu-west-1.amazonaws.com/team/trainer{DIGEST}", "not in this deployment's ECR"),
        (f"docker.io/library/python:3.11{DIGEST}", "RAYFLEET_ALLOWED_IMAGE_PREFIXES"),
    ],
)
def test_refused_with_the_rule_named(ecr, image, message):
    with pytest.raises(ConfigError, match=message):
        image_policy.check(ecr, ACCOUNT, image)


def test_an_allow_listed_registry_only_by_digest(ecr, monkeypatch):
    monkeypatch.setenv(image_policy.ALLOW_ENV, "ghcr.io/my-org/, quay.io/x/")
    image_policy.check(ecr, ACCOUNT, f"ghcr.io/my-org/trainer{DIGEST}")
    with pytest.raises(ConfigError, match="name it by digest"):
        image_policy.check(ecr, ACCOUNT, "ghcr.io/my-org/trainer:v1")
    with pytest.raises(ConfigError, match="RAYFLEET_ALLOWED_IMAGE_PREFIXES"):
        image_policy.check(ecr, ACCOUNT, f"ghcr.io/other/trainer{DIGEST}")


def test_an_allow_listed_prefix_ends_at_a_boundary(ecr, monkeypatch):
    """`ghcr.io/acme` admits its own repositories, not `ghcr.io/acme-evil/...` (issue 27, low)."""
    monkeypatch.setenv(image_policy.ALLOW_ENV, "ghcr.io/acme")
    image_policy.check(ecr, ACCOUNT, f"ghcr.io/acme/trainer{DIGEST}")
    with pytest.raises(ConfigError, match="RAYFLEET_ALLOWED_IMAGE_PREFIXES"):
        image_policy.check(ecr, ACCOUNT, f"ghcr.io/acme-evil/trainer{DIGEST}")
