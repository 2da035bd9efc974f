# Ray Serve (make serve): the API key every request carries. Like the Ray token, Terraform makes the secret and
# never its value (`make deploy` seeds it: scripts/ecs/rotate_token.py `seed_token`); ECS hands it to the
# workers, where Serve's replicas run, through the task definition's `secrets`. Callers read it with
# GetSecretValue as far as their IAM policies allow; the execution role may read it (iam module).
resource "aws_secretsmanager_secret" "serve_api_key" {
  # checkov:skip=CKV2_AWS_57: a new key must reach the workers (restart) and every caller; rotate by hand with make deploy after deleting the version
  count                   = var.serve == null ? 0 : 1
  name_prefix             = "${var.name}/serve-api-key-"
  description             = "API key of ${var.name}'s Ray Serve endpoint (Authorization: Bearer <key>)"
  kms_key_id              = var.kms_key_arn
  recovery_window_in_days = 7
  tags                    = merge(var.tags, { Component = "serve" })
}
