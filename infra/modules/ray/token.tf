# Ray's token auth: no request reaches the GCS, dashboard or Jobs API without this token. Terraform makes the
# secret and its policy and never touches the value: the AWS provider reads a secret version back with
# GetSecretValue on create and on every refresh, which the policy below denies to all but the execution
# role, and a version in state would be re-created as current after rotations. `make deploy` seeds the first
# value (PutSecretValue, only while no version is current: scripts/rayfleet/ecs/rotate_token.py `seed_token`),
# `make rotate-ray-token` writes the next ones; ECS hands it to containers through the task definitions'
# `secrets`, never `environment`. The token is in no state file.
data "aws_caller_identity" "current" {}

# The principal running Terraform as IAM names it (an assumed role's role ARN, path included), which is
# what `aws:PrincipalArn` matches when `make deploy` seeds the token as that principal.
data "aws_iam_session_context" "deployer" {
  arn = data.aws_caller_identity.current.arn
}

resource "aws_secretsmanager_secret" "ray_token" {
  # checkov:skip=CKV2_AWS_57: rotation must restart head then workers; make rotate-ray-token does that, a rotation Lambda cannot
  name_prefix             = "${var.name}/ray-auth-token-"
  description             = "Ray token authentication for ${var.name} (RAY_AUTH_TOKEN)"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
  tags                    = merge(var.tags, { Component = "ray" })
}

# Only the task execution role may read the token; everyone else, account admins and the deployer included,
# is denied GetSecretValue. The deploying principal may write a version (the seed, and rotations), and
# nothing else; other principals write only as far as the account's IAM policies let them. The GCS store's
# token below has the same policy.
locals {
  token_policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "ExecutionRoleReads"
        Effect    = "Allow"
        Principal = { AWS = var.execution_role_arn }
        Action    = "secretsmanager:GetSecretValue"
        Resource  = "*"
      },
      {
        Sid       = "NobodyElseReads"
        Effect    = "Deny"
        Principal = "*"
        Action    = "secretsmanager:GetSecretValue"
        Resource  = "*"
        Condition = { StringNotEquals = { "aws:PrincipalArn" = var.execution_role_arn } }
      },
      {
        Sid       = "DeployerWrites"
        Effect    = "Allow"
        Principal = { AWS = data.aws_iam_session_context.deployer.issuer_arn }
        Action    = "secretsmanager:PutSecretValue"
        Resource  = "*"
      },
    ]
  })
}

resource "aws_secretsmanager_secret_policy" "ray_token" {
  secret_arn = aws_secretsmanager_secret.ray_token.arn
  policy     = local.token_policy
}

# The GCS store's AUTH token (infra/modules/gcs_store), handled as the Ray token is: `make deploy` sets it on
# the replication group and writes it here (scripts/rayfleet/ecs/rotate_token.py `seed_store_token`); only the
# head's `secrets` read it.
resource "aws_secretsmanager_secret" "gcs_store_token" {
  # checkov:skip=CKV2_AWS_57: ElastiCache takes a new token with ModifyReplicationGroup while the head holds the old one; a rotation Lambda cannot restart the head
  count                   = var.gcs_store == null ? 0 : 1
  name_prefix             = "${var.name}/gcs-store-token-"
  description             = "AUTH token of the GCS store of ${var.name} (RAYFLEET_GCS_STORE_PASSWORD in the head)"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
  tags                    = merge(var.tags, { Component = "gcs-store" })
}

resource "aws_secretsmanager_secret_policy" "gcs_store_token" {
  count      = var.gcs_store == null ? 0 : 1
  secret_arn = aws_secretsmanager_secret.gcs_store_token[0].arn
  policy     = local.token_policy
}

# Deployments made before the token left Terraform hold these two in state: forget them, never destroy them
# (destroying the version would read it back with GetSecretValue, which the policy denies). Where even the
# refresh is denied, run once: terraform state rm module.ray.aws_secretsmanager_secret_version.ray_token
# module.ray.random_password.ray_token (infra/README.md).
removed {
  from = aws_secretsmanager_secret_version.ray_token

  lifecycle {
    destroy = false
  }
}

removed {
  from = random_password.ray_token

  lifecycle {
    destroy = false
  }
}
