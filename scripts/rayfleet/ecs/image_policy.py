"""Which images a recipe may run in the trainer task: it gets the cluster's token and the task role.

Accepted: a repository of this deployment's own account and region in ECR, named by a digest
(`...@sha256:<64 hex>`), or by a tag in a repository whose tags are IMMUTABLE (so the tag names one build
forever, as the deployment's own repositories do). Other registries only by digest, and only when
RAYFLEET_ALLOWED_IMAGE_PREFIXES (comma-separated, e.g. `ghcr.io/my-org/`) lists a prefix of the image.
"""

from __future__ import annotations

import os
import re

from rayfleet.core.aws import Aws
from rayfleet.core.errors import ConfigError

ALLOW_ENV = "RAYFLEET_ALLOWED_IMAGE_PREFIXES"
_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/(?P<repo>.+)$")
_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def split(image: str) -> tuple[str, str | None, str | None]:
    """(repository with registry, tag or None, digest or None)."""
    if "@" in image:
        name, _, digest = image.partition("@")
        return name, None, digest
    head, _, last = image.rpartition("/")
    if ":" in last:
        repo, _, tag = last.partition(":")
        return f"{head}/{repo}" if head else repo, tag, None
    return image, None, None


def under(image: str, prefix: str) -> bool:
    """Whether `image` is the allow-listed name or below it, at a boundary: `ghcr.io/acme` admits
    `ghcr.io/acme/x` and `ghcr.io/acme@sha256:...`, never `ghcr.io/acme-evil/x`."""
    base = prefix.rstrip("/")
    return image == base or image.startswith((f"{base}/", f"{base}@", f"{base}:"))


def check(aws: Aws, account: str, image: str) -> None:
    """Raise ConfigError (one line, naming the rule) unless the recipe may run `image`."""
    name, tag, digest = split(image)
    has_digest = digest is not None and bool(_DIGEST.search(image))
    ecr = _ECR.match(name)
    if ecr and ecr["account"] == account and ecr["region"] == aws.region:
        if has_digest:
            return
        if tag is None:
            raise ConfigError(
                f"image: {image} names no tag or digest; pin it (repo:tag in an immutable repository, or @sha256:...)"
            )
        ecr_client = aws.client("ecr")
        try:
            repo = ecr_client.describe_repositories(repositoryNames=[ecr["repo"]])["repositories"][0]
        except ecr_client.exceptions.RepositoryNotFoundException:
            raise ConfigError(f"image: repository {ecr['repo']} does not exist in {account}'s ECR") from None
        if repo.get("imageTagMutability") != "IMMUTABLE":
            raise ConfigError(
                f"image: {image}: tags in {ecr['repo']} are mutable, so the tag may not name what was tested; "
                "use @sha256:<digest>, or make the repository's tags immutable"
            )
        return
    allowed = [p.strip() for p in os.environ.get(ALLOW_ENV, "").split(",") if p.strip()]
    if not any(under(image, prefix) for prefix in allowed):
        raise ConfigError(
            f"image: {image} is not in this deployment's ECR ({account}, {aws.region}); other registries need "
            f"{ALLOW_ENV} to list them"
        )
    if not has_digest:
        raise ConfigError(f"image: {image} is outside this deployment's ECR: name it by digest (@sha256:...)")
