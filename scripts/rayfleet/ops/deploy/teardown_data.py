"""What `down` deletes before Terraform can destroy the deployment: every object version of the results bucket
(only when asked) and every image of the repositories."""

from __future__ import annotations

from botocore.exceptions import ClientError

from rayfleet.core.errors import RayfleetError


def error_code(exc: Exception) -> str:
    return getattr(exc, "response", {}).get("Error", {}).get("Code", "")


def results_held(s3, bucket: str) -> tuple[int, int] | None:
    """(objects, versions and delete markers) in the bucket, or None when the bucket is gone."""
    keys, versions = set(), 0
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            for entry in [*page.get("Versions", []), *page.get("DeleteMarkers", [])]:
                keys.add(entry["Key"])
                versions += 1
    except ClientError as exc:
        if error_code(exc) == "NoSuchBucket":
            return None
        raise
    return len(keys), versions


def empty_bucket(s3, bucket: str, say=print) -> int:
    """Delete every version and delete marker (the bucket is versioned); returns how many, 0 when gone."""
    deleted = 0
    try:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
            entries = [*page.get("Versions", []), *page.get("DeleteMarkers", [])]
            for start in range(0, len(entries), 1000):  # DeleteObjects takes at most 1000 keys
                batch = [{"Key": e["Key"], "VersionId": e["VersionId"]} for e in entries[start : start + 1000]]
                answer = s3.delete_objects(Bucket=bucket, Delete={"Objects": batch, "Quiet": True})
                if answer.get("Errors"):
                    first = answer["Errors"][0]
                    raise RayfleetError(
                        f"could not delete {len(answer['Errors'])} object version(s) of {bucket}, e.g. "
                        f"{first.get('Key')}: {first.get('Code')} {first.get('Message', '')}".strip()
                    )
                deleted += len(batch)
    except ClientError as exc:
        if error_code(exc) != "NoSuchBucket":
            raise
        say(f"bucket {bucket} is already gone")
        return 0
    say(f"emptied bucket {bucket}: {deleted} object version(s) and delete marker(s) deleted")
    return deleted


def empty_repository(ecr, name: str, say=print) -> int:
    """Delete every image of an ECR repository (images are rebuilt from git by `make build push`)."""
    deleted = 0
    try:
        for page in ecr.get_paginator("list_images").paginate(repositoryName=name):
            digests = sorted({i["imageDigest"] for i in page.get("imageIds", []) if i.get("imageDigest")})
            ids = [{"imageDigest": d} for d in digests]  # by digest: every tag of the image goes with it
            for start in range(0, len(ids), 100):  # BatchDeleteImage takes at most 100 ids
                answer = ecr.batch_delete_image(repositoryName=name, imageIds=ids[start : start + 100])
                failures = [f for f in answer.get("failures", []) if f.get("failureCode") != "ImageNotFound"]
                if failures:
                    raise RayfleetError(
                        f"could not delete {len(failures)} image(s) of {name}: "
                        f"{failures[0].get('failureCode')} {failures[0].get('failureReason', '')}".strip()
                    )
                deleted += len(ids[start : start + 100])
    except ClientError as exc:
        if error_code(exc) != "RepositoryNotFoundException":
            raise
        say(f"repository {name} is already gone")
        return 0
    say(f"emptied repository {name}: {deleted} image(s) deleted")
    return deleted
