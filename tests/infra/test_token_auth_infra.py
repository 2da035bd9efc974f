"""Every Ray container runs with token auth and gets its token from Secrets Manager, never from plain
environment; the secret is KMS-encrypted and only the execution role may read it."""

from __future__ import annotations

import json
import re

from tests.infra.hcl import MODULES, load_dir, merged, resources

RAY = load_dir(MODULES / "ray")
LOCALS = merged(RAY, "locals")
RAY_CONTAINERS = ("head_container", "worker_container", "trainer_container")


def test_the_shared_ray_environment_turns_token_auth_on_and_holds_no_token():
    env = {e["name"]: e["value"] for e in LOCALS["ray_environment"]}
    assert env["RAY_AUTH_MODE"] == "token"
    assert "RAY_AUTH_TOKEN" not in env and "RAY_AUTH_TOKEN_PATH" not in env


def test_every_ray_container_uses_that_environment_and_the_secret():
    secrets = LOCALS["ray_secrets"]
    assert secrets == [{"name": "RAY_AUTH_TOKEN", "valueFrom": "${aws_secretsmanager_secret.ray_token.arn}"}]
    for role in RAY_CONTAINERS:
        container = LOCALS[role]
        assert container["environment"].startswith("${concat(local.ray_environment, local."), role
        assert container["secrets"] == "${local.ray_secrets}", role
        own = LOCALS[container["environment"].split("local.")[-1].rstrip(")}")]
        assert "TOKEN" not in json.dumps(own), role


def test_the_token_is_in_no_environment_anywhere():
    text = "".join(p.read_text() for p in (MODULES / "ray").glob("*.tf"))
    for key in ("random_password.ray_token.result",):
        assert text.count(key) == 1 and "secret_string = random_password.ray_token.result" in text
    containers = json.dumps({k: v for k, v in LOCALS.items() if k.endswith("_container") or k.endswith("environment")})
    assert "random_password" not in containers and "secret_string" not in containers
    outputs = json.dumps(merged(RAY, "output"))
    assert "random_password" not in outputs and "secret_version" not in outputs


def test_the_sidecar_is_not_a_ray_process_and_gets_no_token():
    sidecar = LOCALS["gpu_metrics_container"]
    assert "secrets" not in sidecar
    assert "TOKEN" not in json.dumps(sidecar)


def test_the_secret_is_encrypted_and_only_the_execution_role_reads_it():
    secret = resources(RAY, "aws_secretsmanager_secret")["ray_token"]
    assert secret["kms_key_id"] == "${var.kms_key_arn}"
    policy_text = resources(RAY, "aws_secretsmanager_secret_policy")["ray_token"]["policy"]
    assert "jsonencode(" in policy_text
    assert policy_text.count("var.execution_role_arn") == 2  # the Allow's principal and the Deny's exception
    assert '"Effect": "Deny"' in policy_text and '"aws:PrincipalArn": "${var.execution_role_arn}"' in policy_text
    assert "secretsmanager:GetSecretValue" in policy_text and "task_role" not in policy_text


def test_rotation_is_not_undone_by_the_next_apply():
    version = resources(RAY, "aws_secretsmanager_secret_version")["ray_token"]
    ignored = version["lifecycle"][0]["ignore_changes"]
    assert "${secret_string}" in ignored or "secret_string" in json.dumps(ignored)


def test_the_execution_role_can_read_exactly_this_deployments_token():
    iam = merged(load_dir(MODULES / "iam"), "locals")
    policy = json.dumps(resources(load_dir(MODULES / "iam"), "aws_iam_role_policy")["execution"])
    assert "secret:${var.name}/ray-auth-token-*" in policy
    assert iam["assume"]  # the roles exist; the task role reads recipe secrets only, never the token:
    task_policy = json.dumps(resources(load_dir(MODULES / "iam"), "aws_iam_role_policy")["task"])
    secret_arns = re.findall(r"arn:[^\"\\]*:secretsmanager:[^\"\\]*", task_policy)
    assert secret_arns and all(arn.endswith(":secret:${var.name}/recipes/*") for arn in secret_arns)
    assert "ray-auth-token" not in task_policy and '"secretsmanager:*"' not in task_policy
    parameter_arns = re.findall(r"arn:[^\"\\]*:ssm:[^\"\\]*", task_policy)
    assert parameter_arns and all(arn.endswith(":parameter/${var.name}/recipes/*") for arn in parameter_arns)
