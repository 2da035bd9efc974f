locals {
  tags         = merge(var.tags, { Component = "storage" })
  queue_prefix = "queue/"
}

# Each run writes under runs/<run-name>/ (checkpoints, metrics, launch record); cluster/ holds the head's
# status snapshot; data/ holds datasets a job reads; queue/ the run queue's entries and ledger; staged/ a
# recipe's data: (the deployer writes it, the tasks only read it). The task role is limited to these prefixes
# (iam module); training/rayfleet/core/bucket.py declares the layout and which process uses each prefix.
resource "aws_s3_bucket" "results" {
  # checkov:skip=CKV_AWS_18: access logging needs a second bucket per deployment; CloudTrail data events are the account-level answer
  # checkov:skip=CKV_AWS_144: cross-region replication of checkpoints doubles their cost; opt in outside this module
  # checkov:skip=CKV2_AWS_62: nothing consumes bucket events
  bucket_prefix = "${var.name}-results-"
  force_destroy = var.force_destroy
  tags          = local.tags
}

resource "aws_s3_bucket_public_access_block" "results" {
  bucket                  = aws_s3_bucket.results.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_ownership_controls" "results" {
  bucket = aws_s3_bucket.results.id
  rule {
    object_ownership = "BucketOwnerEnforced"
  }
}

resource "aws_s3_bucket_server_side_encryption_configuration" "results" {
  bucket = aws_s3_bucket.results.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm     = "aws:kms"
      kms_master_key_id = var.kms_key_arn
    }
    bucket_key_enabled = true # one KMS call per object key prefix instead of per request: checkpoints are many parts
  }
}

resource "aws_s3_bucket_versioning" "results" {
  bucket = aws_s3_bucket.results.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "results" {
  bucket = aws_s3_bucket.results.id

  rule {
    id     = "old-checkpoints"
    status = "Enabled"
    filter {
      prefix = "runs/"
    }
    transition {
      days          = var.checkpoint_ia_days
      storage_class = "STANDARD_IA"
    }
    dynamic "expiration" {
      for_each = var.run_expiration_days == null ? [] : [var.run_expiration_days]
      content {
        days = expiration.value
      }
    }
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_days
    }
  }

  rule {
    id     = "incomplete-uploads"
    status = "Enabled"
    filter {}
    abort_incomplete_multipart_upload {
      days_after_initiation = 1
    }
    noncurrent_version_expiration {
      noncurrent_days = var.noncurrent_version_days
    }
  }

  depends_on = [aws_s3_bucket_versioning.results]
}

resource "aws_s3_bucket_policy" "results" {
  bucket = aws_s3_bucket.results.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid       = "TLSOnly"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = [aws_s3_bucket.results.arn, "${aws_s3_bucket.results.arn}/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
  })
  depends_on = [aws_s3_bucket_public_access_block.results]
}
