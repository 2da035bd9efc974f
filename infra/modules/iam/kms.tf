data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  account   = data.aws_caller_identity.current.account_id
  region    = data.aws_region.current.name
  partition = data.aws_partition.current.partition
  log_arn   = "arn:${local.partition}:logs:${local.region}:${local.account}:log-group:/rayfleet/${var.name}/*"
  # The ECS cluster is named after the deployment (infra/modules/cluster); known here without depending on it.
  cluster_arn = "arn:${local.partition}:ecs:${local.region}:${local.account}:cluster/${var.name}"
  # The observability module's topic, by its name (that module takes this key: no reference back).
  notifications_topic_arn = "arn:${local.partition}:sns:${local.region}:${local.account}:${var.name}-notifications"
}

# Auto Scaling's service-linked role, which the key policy names. AWS creates it with an account's first Auto
# Scaling group, so a fresh account has none, and KMS refuses a key policy naming a principal that does not
# exist (MalformedPolicyDocumentException). `make deploy` creates a missing one before Terraform runs
# (scripts/rayfleet/ops/deploy/infra.py); a pipeline that runs Terraform alone sets create = true in a fresh account, and the
# key policy then references the role, so the key comes after it. Only one may exist per account.
resource "aws_iam_service_linked_role" "autoscaling" {
  count            = var.create_autoscaling_service_linked_role ? 1 : 0
  aws_service_name = "autoscaling.amazonaws.com"
  description      = "Auto Scaling (created by rayfleet ${var.name} in an account that had none)"
}

locals {
  # A reference when Terraform creates the role, so the key (and its policy) is created after it.
  autoscaling_role_arn = var.create_autoscaling_service_linked_role ? aws_iam_service_linked_role.autoscaling[0].arn : "arn:${local.partition}:iam::${local.account}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
}

# One key for the deployment's logs, bucket, images, volumes and the Ray token secret.
resource "aws_kms_key" "this" {
  description             = "rayfleet ${var.name}: logs, results, images, volumes, Ray token"
  enable_key_rotation     = true
  deletion_window_in_days = 7
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid       = "AccountAdministers"
        Effect    = "Allow"
        Principal = { AWS = "arn:${local.partition}:iam::${local.account}:root" }
        Action    = "kms:*"
        Resource  = "*"
      },
      {
        Sid       = "LogsOfThisDeployment"
        Effect    = "Allow"
        Principal = { Service = "logs.${local.region}.amazonaws.com" }
        Action    = ["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"]
        Resource  = "*"
        Condition = { ArnLike = { "kms:EncryptionContext:aws:logs:arn" = local.log_arn } }
      },
      {
        # CloudWatch alarms and EventBridge rules (the head-stopped rule) publish to the encrypted
        # notifications topic as their services.
        Sid       = "AlarmsAndEventsToTheNotificationsTopic"
        Effect    = "Allow"
        Principal = { Service = ["cloudwatch.amazonaws.com", "events.amazonaws.com"] }
        Action    = ["kms:Decrypt", "kms:GenerateDataKey*"]
        Resource  = "*"
        Condition = { StringEquals = { "aws:SourceAccount" = local.account } }
      },
      {
        # Auto Scaling launches instances with encrypted root volumes on the caller's behalf.
        Sid       = "AutoScalingVolumes"
        Effect    = "Allow"
        Principal = { AWS = local.autoscaling_role_arn }
        Action    = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey"]
        Resource  = "*"
      },
      {
        # EC2 attaches the volumes with a grant: only grants for an AWS resource (AWS's key policy for EBS),
        # never one Auto Scaling's role could hand to anyone else.
        Sid       = "AutoScalingVolumeGrants"
        Effect    = "Allow"
        Principal = { AWS = local.autoscaling_role_arn }
        Action    = "kms:CreateGrant"
        Resource  = "*"
        Condition = { Bool = { "kms:GrantIsForAWSResource" = "true" } }
      },
    ]
  })
  tags = merge(var.tags, { Component = "iam" })
}

resource "aws_kms_alias" "this" {
  name          = "alias/rayfleet-${var.name}"
  target_key_id = aws_kms_key.this.key_id
}
