# Ray's token auth: no request reaches the GCS, dashboard or Jobs API without this token. It is generated
# here, kept only in Secrets Manager (and Terraform state, which must therefore be an encrypted backend),
# and handed to containers through the task definitions' `secrets`, never `environment`.
resource "random_password" "ray_token" {
  length  = 48
  special = false
}

resource "aws_secretsmanager_secret" "ray_token" {
  # checkov:skip=CKV2_AWS_57: rotation must restart head then workers; make rotate-ray-token does that, a rotation Lambda cannot
  name_prefix             = "${var.name}/ray-auth-token-"
  description             = "Ray token authentication for ${var.name} (RAY_AUTH_TOKEN)"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
  tags                    = merge(var.tags, { Component = "ray" })
}

resource "aws_secretsmanager_secret_version" "ray_token" {
  secret_id     = aws_secretsmanager_secret.ray_token.id
  secret_string = random_password.ray_token.result

  lifecycle {
    # `make rotate-ray-token` writes newer versions; an apply must not roll them back.
    ignore_changes = [secret_string, version_stages]
  }
}

# Only the task execution role may read the token; everyone else, account admins included, is denied
# GetSecretValue. Writing a new version (rotation) stays with the account's IAM policies.
resource "aws_secretsmanager_secret_policy" "ray_token" {
  secret_arn = aws_secretsmanager_secret.ray_token.arn
  policy = jsonencode({
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
    ]
  })
}
