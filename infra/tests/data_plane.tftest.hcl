# The storage, registry and observability modules as Terraform renders them (mocked providers): the
# results bucket is private, encrypted and TLS-only; images are immutable, scanned and expire; the idle
# alarm and the dashboard come from monitoring/metrics.json, the spec the GPU-metrics sidecar publishes.

mock_provider "aws" {
  source = "./tests"
}

variables {
  name        = "rayfleet"
  kms_key_arn = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
  spec        = jsondecode(file("../monitoring/metrics.json"))
}

run "storage" {
  command = apply

  module {
    source = "./modules/storage"
  }

  assert {
    condition = (
      aws_s3_bucket.results.bucket_prefix == "rayfleet-results-" && !aws_s3_bucket.results.force_destroy &&
      aws_s3_bucket_public_access_block.results.block_public_acls && aws_s3_bucket_public_access_block.results.block_public_policy &&
      aws_s3_bucket_public_access_block.results.ignore_public_acls && aws_s3_bucket_public_access_block.results.restrict_public_buckets &&
      one(aws_s3_bucket_ownership_controls.results.rule).object_ownership == "BucketOwnerEnforced"
    )
    error_message = "The results bucket is private, owner-enforced, and kept by make clean unless results_force_destroy."
  }

  assert {
    condition = [
      for r in aws_s3_bucket_server_side_encryption_configuration.results.rule :
      [one(r.apply_server_side_encryption_by_default).sse_algorithm, one(r.apply_server_side_encryption_by_default).kms_master_key_id, r.bucket_key_enabled]
    ] == [["aws:kms", var.kms_key_arn, true]]
    error_message = "Objects are encrypted with the deployment's key, with an S3 bucket key."
  }

  assert {
    condition = jsondecode(aws_s3_bucket_policy.results.policy).Statement == [{
      Sid       = "TLSOnly"
      Effect    = "Deny"
      Principal = "*"
      Action    = "s3:*"
      Resource  = ["arn:aws:s3:::rayfleet-results-20250601", "arn:aws:s3:::rayfleet-results-20250601/*"]
      Condition = { Bool = { "aws:SecureTransport" = "false" } }
    }]
    error_message = "The bucket refuses every request without TLS: ${aws_s3_bucket_policy.results.policy}"
  }

  assert {
    condition = (
      one(aws_s3_bucket_versioning.results.versioning_configuration).status == "Enabled" &&
      { for r in aws_s3_bucket_lifecycle_configuration.results.rule : r.id => [r.status, length(r.expiration)] } == { "old-checkpoints" = ["Enabled", 0], "incomplete-uploads" = ["Enabled", 0] } &&
      output.prefixes == ["runs/", "data/", "queue/"] && output.control_prefix == "cluster/" && output.queue_prefix == "queue/"
    )
    error_message = "Versioned; old checkpoints move to IA and nothing expires by default; the tasks' prefixes."
  }
}

run "registry" {
  command = apply

  module {
    source = "./modules/registry"
  }

  variables {
    images = toset(["ray-head", "ray-worker", "trainer", "gpu-metrics"])
  }

  assert {
    condition = alltrue([
      for k, r in aws_ecr_repository.this :
      r.name == "rayfleet/${k}" && r.image_tag_mutability == "IMMUTABLE" && one(r.image_scanning_configuration).scan_on_push &&
      one(r.encryption_configuration).encryption_type == "KMS" && one(r.encryption_configuration).kms_key == var.kms_key_arn
    ])
    error_message = "Each image has an immutable, scanned, KMS-encrypted repository named rayfleet/<image>."
  }

  # issue 15 item 15: the image a service runs is never expired. `make deploy` (and `make push` of the deployed
  # tag) adds `deployed-<tag>` to it and keeps at most 10 images so marked (scripts/rayfleet/ops/images.py
  # mark_deployed), so rule 1 expires none of them, and an image a higher-priority rule selects cannot be
  # expired by a lower one (Amazon ECR User Guide, lifecycle policy evaluation rules).
  assert {
    condition = [for r in jsondecode(aws_ecr_lifecycle_policy.this["trainer"].policy).rules : [r.rulePriority, r.selection.tagStatus, try(r.selection.tagPrefixList, null), r.selection.countType, r.selection.countNumber]] == [
      [1, "tagged", ["deployed-"], "imageCountMoreThan", 10],
      [2, "untagged", null, "sinceImagePushed", 1],
      [3, "any", null, "imageCountMoreThan", 20],
    ]
    error_message = "Deployed images first (10, which make deploy never exceeds), untagged after a day, then the newest 20."
  }
}

run "observability" {
  command = apply

  module {
    source = "./modules/observability"
  }

  variables {
    cluster_name = "rayfleet"
    region       = "us-east-1"
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.gpus_idle.namespace == var.spec.namespace &&
      aws_cloudwatch_metric_alarm.gpus_idle.metric_name == var.spec.idle_alarm.metric &&
      aws_cloudwatch_metric_alarm.gpus_idle.statistic == var.spec.idle_alarm.statistic &&
      aws_cloudwatch_metric_alarm.gpus_idle.dimensions == tomap({ ClusterName = "rayfleet" }) &&
      aws_cloudwatch_metric_alarm.gpus_idle.evaluation_periods == 6 && aws_cloudwatch_metric_alarm.gpus_idle.period == 300 &&
      aws_cloudwatch_metric_alarm.gpus_idle.treat_missing_data == "notBreaching"
    )
    error_message = "The idle alarm watches the sidecar's cluster rollup for 30 minutes; no data (no workers) is not idle."
  }

  assert {
    condition     = can(jsondecode(aws_cloudwatch_dashboard.gpu.dashboard_body).widgets) && length(jsondecode(aws_cloudwatch_dashboard.gpu.dashboard_body).widgets) > 0 && !strcontains(aws_cloudwatch_dashboard.gpu.dashboard_body, format("%s{", "$"))
    error_message = "The rendered dashboard is JSON with widgets, every template variable filled."
  }

  assert {
    condition     = strcontains(aws_cloudwatch_dashboard.gpu.dashboard_body, "ClusterName") && strcontains(aws_cloudwatch_dashboard.gpu.dashboard_body, "rayfleet") && aws_cloudwatch_dashboard.gpu.dashboard_name == "rayfleet-gpu"
    error_message = "The dashboard is scoped to this cluster."
  }
}
