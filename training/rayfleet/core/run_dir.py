"""The one run directory: `<storage>/<run name>/` on local disk or in S3, used by the jobs and the verbs.

    config.yaml    the job's resolved config             metrics.jsonl   one row per epoch or step
    recipe.yaml    a recipe run's resolved recipe        run.json        the run record (below)
    driver.log     the job's output, as it is written    checkpoint_*/   Ray Train's checkpoints
    export/        the FSDP job's Hugging Face export

`run.json` is the one run record: target, job id, code, state, times, exit code, who follows the job. It has
one writer, the process that follows the run's job (`RunDir.update`): `rayfleet run` for a local run, the
trainer task's driver on ECS. Every other process (the ECS submitter, a listing that finds the run lost, the
job's MLflow link) sends it an event (`RunDir.send`: events/<time>-<host>-<pid>-<kind>.json, a new object
each), which every read applies and the owner folds in at its next write.
S3 goes through the AWS adapter (rayfleet.core.aws: the standard credential chain, AWS_ENDPOINT_URL, or
the config's own `s3_endpoint_url` for S3-compatible stores), so it works against moto and MinIO. Ray
Train writes the checkpoints itself and wants a pyarrow filesystem for the same storage: `ray_storage()`
gives it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from botocore.exceptions import ClientError

from rayfleet.core.aws import shared_client
from rayfleet.core.bucket import RUNS, folder
from rayfleet.core.errors import RayfleetError

RECORD = "run.json"
EVENTS = "events"  # changes to the record sent by processes that do not own run.json (RunDir.send)
FOLDED = "events_folded_through"  # in run.json: the last event its owner folded in
LOCAL_RUNS = folder(RUNS)  # where runs live on this machine: ./runs of the directory a run starts from


def runs_root(results_bucket: str | None = None, launch_dir: Path | None = None) -> str:
    """Where runs live, the one place that says it: s3://<results bucket>/runs for a deployment, else the
    absolute ./runs of `launch_dir` (default: the working directory)."""
    if results_bucket:
        return f"s3://{results_bucket}/{LOCAL_RUNS}"
    return str(((launch_dir or Path.cwd()) / LOCAL_RUNS).resolve())


@dataclass(frozen=True)
class RunDir:
    storage: str  # /abs/dir or s3://bucket/prefix
    run_name: str
    endpoint_url: str | None = None  # an S3-compatible store; default: the AWS chain's (AWS_ENDPOINT_URL)
    region: str | None = None  # default: AWS_REGION / AWS_DEFAULT_REGION

    @property
    def is_s3(self) -> bool:
        return self.storage.startswith("s3://")

    @property
    def url(self) -> str:
        return f"{self.storage.rstrip('/')}/{self.run_name}"

    def display(self, *parts: str) -> str:
        """A path a person can paste: s3://... or a local path."""
        return "/".join([self.url, *parts])

    def _s3(self):
        return shared_client("s3", self.region, self.endpoint_url)

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
            tmp.replace(path)  # readers never see half a file
        return self.display(name)

    def create(self, name: str, data: str) -> bool:
        """Write `name` only if it does not exist yet, atomically: False when it does (another writer was first,
        even by a millisecond: S3's conditional write, If-None-Match, or O_EXCL on local disk)."""
        if self.is_s3:
            bucket, key = self._key(name)
            try:
                self._s3().put_object(Bucket=bucket, Key=key, Body=data.encode(), IfNoneMatch="*")
            except ClientError as exc:  # 412: it exists; 409: a concurrent conditional write of the same key
                if exc.response.get("Error", {}).get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
                    return False
                raise
            return True
        path = Path(self.url) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(data)
        return True

    def upload(self, name: str, local: Path) -> str:
        """A local file, or every file under a local directory, to `name` in the run directory."""
        if local.is_dir():
            for file in sorted(p for p in local.rglob("*") if p.is_file()):
                self.upload(f"{name}/{file.relative_to(local).as_posix()}", file)
            return self.display(name)
        if self.is_s3:
            bucket, key = self._key(name)
            self._s3().upload_file(str(local), bucket, key)  # streamed from disk, in parts when large
            return self.display(name)
        path = Path(self.url) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        shutil.copyfile(local, tmp)  # streamed, not read into memory
        tmp.replace(path)  # readers never see half a file
        return self.display(name)

    def download(self, name: str, local: Path) -> Path:
        """One file of the run directory to `local` (streamed); FileNotFoundError when it is not there."""
        if self.is_s3:
            bucket, key = self._key(name)
            client = self._s3()
            try:
                client.download_file(bucket, key, str(local))
            except client.exceptions.ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                    raise FileNotFoundError(f"{self.display(name)} does not exist") from None
                raise
            return local
        source = Path(self.url) / name
        if not source.is_file():
            raise FileNotFoundError(f"{self.display(name)} does not exist")
        shutil.copyfile(source, local)
        return local

    def local_copy(self, name: str, scratch: Path) -> Path:
        """A folder of the run directory as a local path: itself when local, else downloaded under `scratch`
        (every object below `<run>/<name>/`). FileNotFoundError when it holds nothing."""
        if not self.is_s3:
            path = Path(self.url) / name
            if not path.is_dir() or not any(path.iterdir()):
                raise FileNotFoundError(f"{self.display(name)} does not exist or is empty")
            return path
        bucket, key = self._key(name)
        client, target, count = self._s3(), scratch / name, 0
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/"):
            for obj in page.get("Contents", []):
                if obj["Key"].endswith("/"):  # a folder marker (the console's "create folder"): nothing to copy
                    continue
                local = inside(target, obj["Key"][len(key) + 1 :], f"s3://{bucket}/{obj['Key']}")
                local.parent.mkdir(parents=True, exist_ok=True)
                client.download_file(bucket, obj["Key"], str(local))  # streamed to disk, in parts when large
                count += 1
        if not count:
            raise FileNotFoundError(f"{self.display(name)} does not exist or is empty")
        return target

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

    def entries(self) -> list[str]:
        """Names of the files and folders directly in the run directory, sorted."""
        if not self.is_s3:
            root = Path(self.url)
            return sorted(p.name for p in root.iterdir()) if root.is_dir() else []
        bucket, key = self._key("")
        prefix = key + "/"
        names = set()
        for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
            names |= {p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])}
            names |= {o["Key"][len(prefix) :] for o in page.get("Contents", [])}
        return sorted(names)

    # -- the run record: run.json has one writer; every other process sends it events -------------------
    def record(self) -> dict:
        """The run record: run.json as its owner last wrote it, with the events sent since applied in order."""
        record, events = self._record_and_events(self._event_names())
        for _, fields in events:
            record.update(fields)
        record.pop(FOLDED, None)
        return record

    def update(self, **fields) -> dict:
        """The owner's write (the process that follows the run's job: `rayfleet run` for a local run, the
        trainer's driver on ECS): the events sent since its last write are folded in first, in order, then
        its own fields; the folded events are removed. Any other process calls `send` instead."""
        seen = self._event_names()  # only these are folded: one sent after this listing stays for the next read
        record, events = self._record_and_events(seen)
        for _, fields_sent in events:
            record.update(fields_sent)
        record.update(fields)
        if seen:
            record[FOLDED] = max(record.get(FOLDED, ""), seen[-1])
        self.write(RECORD, json.dumps(record, indent=2))
        self.remove([f"{EVENTS}/{name}" for name in seen])
        return {k: v for k, v in record.items() if k != FOLDED}

    def send(self, kind: str, **fields) -> dict:
        """A change to the record from a process that does not own run.json (the submitter on ECS, a listing
        that finds the run lost, the job's MLflow link): a new object of its own, so it never overwrites what
        another process wrote. Returns the record as it now reads."""
        name = f"{time.time_ns():020d}-{socket.gethostname()}-{os.getpid()}-{kind}.json"
        self.write(f"{EVENTS}/{name}", json.dumps(fields))
        return self.record()

    def _event_names(self) -> list[str]:
        """The events in this run directory, oldest first (their names start with the time they were sent)."""
        if not self.is_s3:
            folder = Path(self.url) / EVENTS
            return sorted(p.name for p in folder.glob("*.json")) if folder.is_dir() else []
        bucket, key = self._key(EVENTS)
        pages = self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key + "/")
        return sorted(o["Key"].rsplit("/", 1)[-1] for page in pages for o in page.get("Contents", []))

    def _record_and_events(self, names: list[str]) -> tuple[dict, list[tuple[str, dict]]]:
        """run.json, and those of `names` its owner has not folded yet (a fold whose removal did not finish
        leaves events behind that must not apply twice)."""
        text = self.read(RECORD)
        record = json.loads(text) if text else {}
        folded = record.get(FOLDED, "")
        events = []
        for name in names:
            if name > folded:
                body = self.read(f"{EVENTS}/{name}")
                if body:  # removed by the owner meanwhile: folded
                    events.append((name, json.loads(body)))
        return record, events

    def remove(self, names: list[str]) -> None:
        """Delete these files of the directory (missing ones are fine)."""
        if not names:
            return
        if not self.is_s3:
            for name in names:
                (Path(self.url) / name).unlink(missing_ok=True)
            return
        bucket, _ = self._key("")
        keys = [{"Key": self._key(name)[1]} for name in names]
        for start in range(0, len(keys), 1000):
            done = self._s3().delete_objects(
                Bucket=bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True}
            )
            failed = done.get("Errors") or []  # a batch delete answers 200 and lists each key it refused
            if failed:
                first = failed[0]
                raise RayfleetError(
                    f"could not delete {len(failed)} file(s) of {self.url}, s3://{bucket}/{first.get('Key')} among "
                    f"them: {first.get('Code')} ({first.get('Message')})"
                )

    def ray_storage(self) -> tuple[str, object]:
        """Ray Train's `storage_path` (the storage root, no scheme) and `storage_filesystem` (pyarrow)."""
        import pyarrow.fs as pafs

        if not self.is_s3:
            return self.storage, pafs.LocalFileSystem()
        # The SDK's defaults fail a write after a 1 s connect or 3 s without a byte: a slow connect or a busy S3
        # is not a dead one. On Linux request_timeout is curl's low-speed limit (pyarrow 26 measured; its docs
        # say it is ignored there). Timeouts survive the pickling to the workers, a retry strategy does not.
        # (The "Timeout was reached" seen in CI was the rehearsal's moto starved of its GIL: tools/rehearsal/
        # moto_process.py; these do not hide it, a moto that answers nothing fails the write after 60 s.)
        options = {"connect_timeout": 10.0, "request_timeout": 60.0}
        region = self.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            parsed = urlparse(endpoint)
            options["endpoint_override"] = parsed.netloc
            options["scheme"] = parsed.scheme
        return self.storage.removeprefix("s3://"), pafs.S3FileSystem(**options)


class UnsafeKey(RayfleetError):
    """An object in run storage whose key would land outside the folder it is downloaded into."""


def inside(target: Path, relative: str, url: str) -> Path:
    """Where an object below a downloaded folder goes: `target`/`relative`, never outside `target`. Any job can
    write run storage, so a key is untrusted: absolute keys and `.`, `..` or empty segments are refused."""
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise UnsafeKey(f"refusing to download {url}: its key would leave {target} (., .. or empty segments)")
    local = target.joinpath(*parts)
    if not local.resolve().is_relative_to(target.resolve()):  # a symlink already in the target, say
        raise UnsafeKey(f"refusing to download {url}: it would land outside {target}")
    return local


def list_runs(storage: str, region: str | None = None, endpoint_url: str | None = None) -> list[str]:
    """Run names under a storage root, newest name last (names end in a UTC time)."""
    if storage.startswith("s3://"):
        parsed = urlparse(storage)
        prefix = parsed.path.strip("/") + "/" if parsed.path.strip("/") else ""
        client = shared_client("s3", region, endpoint_url)
        names = []
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=parsed.netloc, Prefix=prefix, Delimiter="/")
        for page in pages:
            names += [p["Prefix"][len(prefix) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
        return sorted(names)
    root = Path(storage)
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
