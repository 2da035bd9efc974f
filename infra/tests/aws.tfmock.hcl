# Values the mocked hashicorp/aws gives what AWS would compute, shared by every test file here
# (`mock_provider "aws" { source = "./tests" }`). Without them Terraform generates random strings, empty
# lists and zeros: realistic ARNs and ids keep the rendered policies and container definitions readable,
# and the availability zones list must not be empty (the network module slices it).

mock_data "aws_availability_zones" {
  defaults = {
    names    = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
    zone_ids = ["use1-az1", "use1-az2", "use1-az4", "use1-az6"]
  }
}

mock_data "aws_region" {
  defaults = {
    name = "us-east-1"
    id   = "us-east-1"
  }
}

mock_data "aws_caller_identity" {
  defaults = {
    account_id = "123456789012"
    arn        = "arn:aws:iam::123456789012:user/ci"
    user_id    = "AIDAEXAMPLEUSERID"
  }
}

# The deploying principal behind the caller identity (the Ray token secret's policy lets it write).
mock_data "aws_iam_session_context" {
  defaults = {
    issuer_arn = "arn:aws:iam::123456789012:user/ci"
  }
}

mock_data "aws_partition" {
  defaults = {
    partition  = "aws"
    dns_suffix = "amazonaws.com"
  }
}

# The ECS-optimized AMI ids the cluster module reads from SSM.
mock_data "aws_ssm_parameter" {
  defaults = {
    value = "ami-0123456789abcdef0"
  }
}

mock_resource "aws_kms_key" {
  defaults = {
    arn    = "arn:aws:kms:us-east-1:123456789012:key/0b5d3f5e-1111-2222-3333-444455556666"
    key_id = "0b5d3f5e-1111-2222-3333-444455556666"
  }
}

mock_resource "aws_iam_role" {
  defaults = {
    arn = "arn:aws:iam::123456789012:role/rayfleet-role"
  }
}

mock_resource "aws_iam_instance_profile" {
  defaults = {
    arn = "arn:aws:iam::123456789012:instance-profile/rayfleet-instance"
  }
}

mock_resource "aws_secretsmanager_secret" {
  defaults = {
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/ray-auth-token-20250601-AbCdEf"
    id  = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rayfleet/ray-auth-token-20250601-AbCdEf"
  }
}

mock_resource "aws_s3_bucket" {
  defaults = {
    arn    = "arn:aws:s3:::rayfleet-results-20250601"
    id     = "rayfleet-results-20250601"
    bucket = "rayfleet-results-20250601"
  }
}

mock_resource "aws_ecr_repository" {
  defaults = {
    arn            = "arn:aws:ecr:us-east-1:123456789012:repository/rayfleet/image"
    repository_url = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rayfleet/image"
  }
}

mock_resource "aws_ecs_cluster" {
  defaults = {
    arn = "arn:aws:ecs:us-east-1:123456789012:cluster/rayfleet"
  }
}

mock_resource "aws_ecs_task_definition" {
  defaults = {
    arn      = "arn:aws:ecs:us-east-1:123456789012:task-definition/rayfleet-task:1"
    revision = 1
  }
}

mock_resource "aws_launch_template" {
  defaults = {
    id             = "lt-0123456789abcdef0"
    latest_version = 1
  }
}

mock_resource "aws_autoscaling_group" {
  defaults = {
    arn = "arn:aws:autoscaling:us-east-1:123456789012:autoScalingGroup:0a1b2c3d:autoScalingGroupName/rayfleet"
  }
}

mock_resource "aws_vpc" {
  defaults = {
    id = "vpc-0123456789abcdef0"
  }
}

mock_resource "aws_subnet" {
  defaults = {
    id = "subnet-0123456789abcdef0"
  }
}

mock_resource "aws_security_group" {
  defaults = {
    id = "sg-0123456789abcdef0"
  }
}

mock_resource "aws_cloudwatch_log_group" {
  defaults = {
    arn = "arn:aws:logs:us-east-1:123456789012:log-group:/rayfleet/rayfleet"
  }
}

mock_resource "aws_service_discovery_private_dns_namespace" {
  defaults = {
    id = "ns-0123456789abcdef"
  }
}

mock_resource "aws_service_discovery_service" {
  defaults = {
    arn = "arn:aws:servicediscovery:us-east-1:123456789012:service/srv-0123456789abcdef"
  }
}
