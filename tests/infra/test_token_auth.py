"""Terraform never reads the Ray token: it makes the secret and its policy, and `rayfleet deploy` seeds the first
value (rayfleet/ecs/rotate_token.py `seed_token`). The AWS provider reads a secret *version* with
GetSecretValue on create and on every refresh (internal/service/secretsmanager/secret_version.go,
findSecretVersionByTwoPartKey), which the secret's policy denies to everyone but the execution role; the
secret itself is read with DescribeSecret and GetResourcePolicy only. So no configuration here may hold a
secret version (a resource or a data source) or the token's value (a random_password). The rendered
containers' token auth, the secret mapping and its policy are asserted by `terraform test`
(infra/tests/default.tftest.hcl)."""

from __future__ import annotations

from tests.infra.hcl import INFRA, MODULES, load_dir, resources

RAY = load_dir(MODULES / "ray")
CONFIGS = [INFRA, *sorted(p for p in MODULES.iterdir() if p.is_dir())]


def test_terraform_never_reads_or_holds_the_token():
    for directory in CONFIGS:
        config = load_dir(directory)
        held = {
            kind: sorted(resources(config, kind)) for kind in ("aws_secretsmanager_secret_version", "random_password")
        }
        assert held == {"aws_secretsmanager_secret_version": [], "random_password": []}, directory
        data = [d for block in config.get("data", []) for d in block if d == "aws_secretsmanager_secret_version"]
        assert not data, f"{directory}: a data source would read the token (GetSecretValue)"
    assert resources(RAY, "aws_secretsmanager_secret")["ray_token"]  # the secret itself stays Terraform's
