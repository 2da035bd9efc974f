# issue 15 item 15: a fresh account has no Auto Scaling service-linked role, and a KMS key policy that names a
# principal that does not exist is refused (MalformedPolicyDocumentException), so the first deploy failed.
# With create_autoscaling_service_linked_role the iam module creates the role and the key policy names it by
# reference, so Terraform creates the key after the role; without it (the role exists) nothing is created.
# `make deploy` creates a missing role itself before Terraform runs (scripts/rayfleet/ops/deploy/infra.py
# ensure_autoscaling_role; tests/integration/test_deploy_infra_verbs.py) and leaves the variable false.

mock_provider "aws" {
  source = "./tests"
}

variables {
  name             = "rayfleet"
  bucket_arn       = "arn:aws:s3:::rayfleet-results-20250601"
  bucket_prefixes  = ["runs/", "data/"]
  control_prefix   = "cluster/"
  queue_prefix     = "queue/"
  scaled_services  = ["rayfleet-ray-control", "rayfleet-ray-head", "rayfleet-ray-worker-ddp", "rayfleet-ray-worker-fsdp"]
  repository_arns  = ["arn:aws:ecr:us-east-1:123456789012:repository/rayfleet/ray-head"]
  metric_namespace = "Rayfleet/GPU"
}

run "fresh_account" {
  command = apply

  module {
    source = "./modules/iam"
  }

  variables {
    create_autoscaling_service_linked_role = true
  }

  override_resource {
    target = aws_iam_service_linked_role.autoscaling
    values = {
      arn  = "arn:aws:iam::123456789012:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"
      name = "AWSServiceRoleForAutoScaling"
    }
  }

  assert {
    condition     = length(aws_iam_service_linked_role.autoscaling) == 1 && aws_iam_service_linked_role.autoscaling[0].aws_service_name == "autoscaling.amazonaws.com"
    error_message = "A fresh account gets Auto Scaling's service-linked role."
  }

  assert {
    condition = [
      for s in jsondecode(aws_kms_key.this.policy).Statement : s.Principal.AWS if s.Sid == "AutoScalingVolumes"
    ] == [aws_iam_service_linked_role.autoscaling[0].arn]
    error_message = "The key policy names the role Terraform created (a reference: the key is created after it)."
  }
}

run "existing_role" {
  command = plan

  module {
    source = "./modules/iam"
  }

  assert {
    condition     = length(aws_iam_service_linked_role.autoscaling) == 0
    error_message = "By default the role already exists (AWS made it with the account's first Auto Scaling group)."
  }

  assert {
    condition = [
      for s in jsondecode(aws_kms_key.this.policy).Statement : s.Principal.AWS if s.Sid == "AutoScalingVolumes"
    ] == ["arn:aws:iam::123456789012:role/aws-service-role/autoscaling.amazonaws.com/AWSServiceRoleForAutoScaling"]
    error_message = "The key policy names the existing role."
  }
}
