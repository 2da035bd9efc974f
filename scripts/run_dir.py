"""A run's directory: `<storage>/<run name>/` on local disk or in S3, where a recipe run keeps its record.

    recipe.yaml    the recipe as resolved (secret references, never their values)
    run.json       target, job id, code sha256 and where it lives, state, times, exit code
    driver.log     the job's output, written when it ends (and on failure, so nothing is lost)

S3 goes through boto3 and the standard chain (AWS_ENDPOINT_URL included), like every other AWS call of the
scripts, so it works against moto; training/storage.py is the jobs' side (pyarrow, as Ray Train wants).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

RECORD = "run.json"


@dataclass(frozen=True)
class RunDir:
    storage: str  # /abs/dir or s3://bucket/prefix
    run_name: str
    region: str | None = None  # default: AWS_REGION / AWS_DEFAULT_REGION

    @property
    def is_s3(self) -> bool:
        return self.storage.startswith("s3://")

    @property
    def url(self) -> str:
        return f"{self.storage.rstrip('/')}/{self.run_name}"

    def _s3(self):
        import boto3

        region = self.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        return boto3.client("s3", region_name=region)

    def _key(self, name: str) -> tuple[str, str]:
        parsed = urlparse(self.url)
        return parsed.netloc, "/".join(p for p in (parsed.path.strip("/"), name) if p)

    def write(self, name: str, data: bytes | str) -> str:
        body = data.encode() if isinstance(data, str) else data
        if self.is_s3:
            bucket, key = self._key(name)
            self._s3().put_object(Bucket=bucket, Key=key, Body=body)
        else:
            path = Path(self.url) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes(body)
            tmp.replace(path)  # readers never see half a record
        return f"{self.url}/{name}"

    def upload(self, name: str, local: Path) -> str:
        if self.is_s3:
            bucket, key = self._key(name)
            self._s3().upload_file(str(local), bucket, key)
            return f"{self.url}/{name}"
        return self.write(name, local.read_bytes())

    def read(self, name: str) -> str | None:
        if self.is_s3:
            bucket, key = self._key(name)
            client = self._s3()
            try:
                return client.get_object(Bucket=bucket, Key=key)["Body"].read().decode()
            except client.exceptions.NoSuchKey:
                return None
        path = Path(self.url) / name
        return path.read_text() if path.is_file() else None

    def record(self) -> dict:
        text = self.read(RECORD)
        return json.loads(text) if text else {}

    def update(self, **fields) -> dict:
        """Merge fields into run.json (read, merge, write: one writer per run)."""
        record = {**self.record(), **fields}
        self.write(RECORD, json.dumps(record, indent=2))
        return record


def list_runs(storage: str, region: str | None = None) -> list[str]:
    """Run names under a storage root, newest name last (names end in a UTC time)."""
    if storage.startswith("s3://"):
        import boto3

        parsed = urlparse(storage)
        prefix = parsed.path.strip("/") + "/" if parsed.path.strip("/") else ""
        client = boto3.client("s3", region_name=region)
        names = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=parsed.netloc, Prefix=prefix,
                                                                    Delimiter="/"):  # fmt: skip
            names += [p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return sorted(names)
    root = Path(storage)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
