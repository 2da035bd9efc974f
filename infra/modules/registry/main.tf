resource "aws_ecr_repository" "this" {
  for_each             = var.images
  name                 = "${var.name}/${each.value}"
  image_tag_mutability = "IMMUTABLE" # a tag names one build forever: task definitions pin what ran
  force_delete         = var.force_delete

  image_scanning_configuration {
    scan_on_push = true
  }

  encryption_configuration {
    encryption_type = "KMS"
    kms_key         = var.kms_key_arn
  }

  tags = merge(var.tags, { Component = "registry" })
}

locals {
  # Images marked `deployed-<tag>` (the one a service runs, and the last few): `make deploy` and `make push` of
  # the deployed tag add the mark and keep at most this many marked per repository (scripts/rayfleet/ops/images.py
  # DEPLOYED_KEPT, the same number: tests/infra/test_registry_lifecycle.py), so rule 1 expires none of them,
  # and rules of lower priority cannot expire an image rule 1 selects (ECR's lifecycle evaluation rules).
  deployed_prefix = "deployed-"
  keep_deployed   = 10
}

resource "aws_ecr_lifecycle_policy" "this" {
  for_each   = aws_ecr_repository.this
  repository = each.value.name
  policy = jsonencode({
    rules = [
      {
        rulePriority = 1
        description  = "Deployed images: make deploy keeps at most ${local.keep_deployed} marked, so none expire"
        selection    = { tagStatus = "tagged", tagPrefixList = [local.deployed_prefix], countType = "imageCountMoreThan", countNumber = local.keep_deployed }
        action       = { type = "expire" }
      },
      {
        rulePriority = 2
        description  = "Untagged layers of failed or superseded pushes"
        selection    = { tagStatus = "untagged", countType = "sinceImagePushed", countUnit = "days", countNumber = 1 }
        action       = { type = "expire" }
      },
      {
        rulePriority = 3
        description  = "Keep the newest ${var.keep_images} images"
        selection    = { tagStatus = "any", countType = "imageCountMoreThan", countNumber = var.keep_images }
        action       = { type = "expire" }
      },
    ]
  })
}
