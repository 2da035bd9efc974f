"""Resolve a recipe's secret references where the job is submitted from, never before.

    secretsmanager:<name or ARN>   Secrets Manager (on ECS the task role may read <name>/recipes/*)
    ssm:<parameter name>           SSM Parameter Store, decrypted (on ECS: /<name>/recipes/*)
    env:<VARIABLE>                 the submitting process's environment (local runs only)

Values go into the job's environment only: not into the recipe, the run record, the RunTask overrides or
any output.
"""

from __future__ import annotations

import os

from scripts.aws import RayfleetError


def check_target(refs: dict[str, str], target: str) -> None:
    if target == "ecs":
        local_only = [k for k, ref in refs.items() if ref.startswith("env:")]
        if local_only:
            raise RayfleetError(f"env.{local_only[0]}: env: secrets exist only where `make run` runs; on ECS use "
                                "secretsmanager:<name> or ssm:<parameter>")  # fmt: skip


def resolve(refs: dict[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    clients: dict[str, object] = {}

    def client(service: str):
        if service not in clients:
            import boto3

            clients[service] = boto3.client(service)
        return clients[service]

    for key, ref in refs.items():
        scheme, _, name = ref.partition(":")
        try:
            if scheme == "env":
                if name not in os.environ:
                    raise RayfleetError(f"env.{key}: {ref} is not set in this environment")
                values[key] = os.environ[name]
            elif scheme == "secretsmanager":
                values[key] = client("secretsmanager").get_secret_value(SecretId=name)["SecretString"]
            elif scheme == "ssm":
                values[key] = client("ssm").get_parameter(Name=name, WithDecryption=True)["Parameter"]["Value"]
        except RayfleetError:
            raise
        except Exception as exc:  # name the key, never the value
            raise RayfleetError(f"env.{key}: cannot read {ref}: {type(exc).__name__}: {exc}") from None
    return values
