"""A recipe's secret references: handed to the job as references, resolved in the job's own process.

    secretsmanager:<name or ARN>   Secrets Manager (on ECS the task role may read <name>/recipes/*)
    ssm:<parameter name>           SSM Parameter Store, decrypted (on ECS: /<name>/recipes/*)
    env:<VARIABLE>                 the submitting process's environment (local runs only)

The submitter never puts a value into what Ray sees (runtime_env, entrypoint, metadata): Ray logs a job's
runtime_env in runtime_env_agent.log on every node that builds it, keeps it in the GCS and returns it from
the Jobs API. The job gets RAYFLEET_SECRET_REFS instead, a JSON map of name -> reference, and its
entrypoint starts with `python -m rayfleet.recipes.job_entry`, which resolves them in the job's own process
(`resolve`, through the AWS adapter) and execs the recipe's command with the values in its environment.
An `env:` value exists only where `make run` runs, so `handoff` writes it to a file of its own in a private
(0700) directory on this machine and passes `file:<path>`; the directory is removed when the run ends.

Values go into the job's environment only: not into the recipe, the run record, the RunTask overrides, Ray
or any output.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rayfleet.core.aws import Aws
from rayfleet.core.errors import RayfleetError

REFS_VAR = "RAYFLEET_SECRET_REFS"


def check_target(refs: dict[str, str], target: str) -> None:
    if target == "ecs":
        local_only = [k for k, ref in refs.items() if ref.startswith("env:")]
        if local_only:
            raise RayfleetError(
                f"env.{local_only[0]}: env: secrets exist only where `rayfleet run` runs; on ECS use "
                "secretsmanager:<name> or ssm:<parameter>"
            )


@contextmanager
def handoff(refs: dict[str, str]) -> Iterator[dict[str, str]]:
    """The references the job gets: `env:` ones become `file:` ones (a 0600 file in a 0700 directory of
    this machine, removed on exit); the others pass as they are, unread."""
    local = {k: ref.partition(":")[2] for k, ref in refs.items() if ref.startswith("env:")}
    missing = [k for k, name in local.items() if name not in os.environ]
    if missing:
        raise RayfleetError(f"env.{missing[0]}: {refs[missing[0]]} is not set in this environment")
    if not local:
        yield dict(refs)
        return
    directory = Path(tempfile.mkdtemp(prefix="rayfleet-secrets-"))  # 0700
    try:
        handed = dict(refs)
        for key, name in local.items():
            path = directory / key
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.environ[name])
            handed[key] = f"file:{path}"
        yield handed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def resolve(refs: dict[str, str]) -> dict[str, str]:
    """Reference -> value, in the process that needs the values (the job's; see rayfleet.recipes.job_entry)."""
    values: dict[str, str] = {}
    aws: list[Aws] = []  # made on first use: env: and file: references need no AWS at all

    def client(service: str):
        if not aws:
            aws.append(Aws())
        return aws[0].client(service)

    for key, ref in refs.items():
        scheme, _, name = ref.partition(":")
        try:
            if scheme == "env":
                if name not in os.environ:
                    raise RayfleetError(f"env.{key}: {ref} is not set in this environment")
                values[key] = os.environ[name]
            elif scheme == "file":
                values[key] = Path(name).read_text()
            elif scheme == "secretsmanager":
                values[key] = client("secretsmanager").get_secret_value(SecretId=name)["SecretString"]
            elif scheme == "ssm":
                values[key] = client("ssm").get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
            else:
                raise RayfleetError(f"env.{key}: {ref} is not a secret reference")
        except RayfleetError:
            raise
        except Exception as exc:  # name the key, never the value
            raise RayfleetError(f"env.{key}: cannot read {ref}: {type(exc).__name__}: {exc}") from None
    return values
