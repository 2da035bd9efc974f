"""Run storage: a local directory or s3://bucket/prefix (with an optional endpoint for S3-compatible stores).

One place turns the config's `storage` into what Ray Train wants (`storage_path` + a pyarrow filesystem)
and gives the jobs small helpers to write their own files (metrics.jsonl, config.yaml) next to Ray's.
Credentials come from the standard AWS chain of the process that uses the filesystem (on ECS, the
task role), never from the config.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlparse

import pyarrow.fs as pafs


@dataclass(frozen=True)
class Storage:
    url: str  # as configured: /abs/path or s3://bucket/prefix
    endpoint_url: str | None = None

    @property
    def is_s3(self) -> bool:
        return self.url.startswith("s3://")

    def filesystem(self) -> pafs.FileSystem:
        if not self.is_s3:
            return pafs.LocalFileSystem()
        options = {}
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        if self.endpoint_url:
            parsed = urlparse(self.endpoint_url)
            options["endpoint_override"] = parsed.netloc
            options["scheme"] = parsed.scheme
        return pafs.S3FileSystem(**options)

    @property
    def root(self) -> str:
        """The storage root as a path of `filesystem()` (no scheme)."""
        return self.url.removeprefix("s3://") if self.is_s3 else self.url

    def run_path(self, run_name: str, *parts: str) -> str:
        return "/".join([self.root, run_name, *parts])

    def display(self, run_name: str, *parts: str) -> str:
        """A path a person can paste: s3://... or a local path."""
        path = self.run_path(run_name, *parts)
        return f"s3://{path}" if self.is_s3 else path

    def write_text(self, path: str, text: str) -> None:
        fs = self.filesystem()
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as out:  # whole-object writes: S3 has no append
            out.write(text.encode())

    def read_text(self, path: str) -> str | None:
        fs = self.filesystem()
        if fs.get_file_info(path).type == pafs.FileType.NotFound:
            return None
        with fs.open_input_stream(path) as src:
            return src.read().decode()

    def list_dir(self, path: str) -> list[str]:
        fs = self.filesystem()
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        return sorted(info.base_name for info in infos)
