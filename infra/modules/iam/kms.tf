data "aws_caller_identity" "current" {}
data "aws_region" "current" {}
data "aws_partition" "current" {}

locals {
  account   = data.aws_caller_identity.current.account_id
  region    = data.aws_region.current.name
  partition = data.aws_partition.current.partition
  log_arn   = "arn:${local.partition}:logs:${local.region}:${local.account}:log-group:/rayfleet/${var.name}/*"
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
        # Auto Scaling launches instances with encrypted root volumes on the caller's behalf.
        Sid       = "AutoScalingVolumes"
        Effect    = "Allow"
        Principal = { AWS = "arn:${local.partition}:iam::${local.account}:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling" }
        Action    = ["kms:Encrypt", "kms:Decrypt", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:DescribeKey", "kms:CreateGrant"]
        Resource  = "*"
      },
    ]
  })
  tags = merge(var.tags, { Component = "iam" })
}

resource "aws_kms_alias" "this" {
  name          = "alias/rayfleet-${var.name}"
  target_key_id = aws_kms_key.this.key_id
}
