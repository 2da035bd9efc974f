locals {
  tags = merge(var.tags, { Component = "cluster" })
  # GPU groups boot the ECS GPU-optimized AMI (NVIDIA driver + container toolkit), CPU groups the plain one.
  ami_parameter = {
    gpu = "/aws/service/ecs/optimized-ami/amazon-linux-2023/gpu/recommended/image_id"
    cpu = "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"
  }
}

data "aws_ssm_parameter" "ami" {
  for_each = local.ami_parameter
  name     = each.value
}

resource "aws_cloudwatch_log_group" "exec" {
  name              = "/rayfleet/${var.name}/ecs-exec"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = local.tags
}

resource "aws_ecs_cluster" "this" {
  name = var.name

  setting {
    name  = "containerInsights"
    value = "enabled"
  }

  # Every `make exec` session is logged, encrypted, so shell access to a task leaves a trail.
  configuration {
    execute_command_configuration {
      kms_key_id = var.kms_key_arn
      logging    = "OVERRIDE"
      log_configuration {
        cloud_watch_encryption_enabled = true
        cloud_watch_log_group_name     = aws_cloudwatch_log_group.exec.name
      }
    }
  }

  tags = local.tags
}

resource "aws_placement_group" "this" {
  for_each = { for k, g in var.node_groups : k => g if g.placement_group }
  name     = "${var.name}-${each.key}"
  strategy = "cluster"
  tags     = local.tags
}

resource "aws_launch_template" "this" {
  for_each      = var.node_groups
  name_prefix   = "${var.name}-${each.key}-"
  image_id      = data.aws_ssm_parameter.ami[each.value.gpus > 0 ? "gpu" : "cpu"].value
  instance_type = each.value.instance_type

  iam_instance_profile {
    arn = var.instance_profile_arn
  }

  # With EFA the interfaces are declared here; otherwise the ASG's subnets and these groups apply.
  vpc_security_group_ids = each.value.efa ? null : var.security_group_ids

  # One EFA interface per EFA device of the type (the catalog's efa_devices): network card 0 carries the primary
  # interface (device 0), every further card one more EFA interface (device 1), so the workers can map every
  # /dev/infiniband/uverbsN (infra/modules/ray).
  dynamic "network_interfaces" {
    for_each = each.value.efa ? range(max(each.value.efa_interfaces, 1)) : []
    content {
      network_card_index    = network_interfaces.value
      device_index          = network_interfaces.value == 0 ? 0 : 1
      interface_type        = "efa"
      security_groups       = concat(var.security_group_ids, var.efa_security_group_ids)
      delete_on_termination = true
    }
  }

  block_device_mappings {
    device_name = "/dev/xvda"
    ebs {
      volume_size           = each.value.root_volume_gb
      volume_type           = "gp3"
      encrypted             = true
      kms_key_id            = var.kms_key_arn
      delete_on_termination = true
    }
  }

  # IMDSv2 only, one hop. No container reaches it: the agent blocks it for awsvpc tasks, the user data's guard
  # for bridge and host-network containers (user_data.sh.tftpl); the sidecar reads its instance from a file
  # the guard writes. The instance role holds only the ECS agent's rights in this cluster (infra/modules/iam).
  metadata_options {
    http_endpoint               = "enabled"
    http_tokens                 = "required"
    http_put_response_hop_limit = 1
  }

  monitoring {
    enabled = true
  }

  user_data = base64encode(join("", [
    templatefile("${path.module}/user_data.sh.tftpl", {
      cluster    = aws_ecs_cluster.this.name
      node_group = each.key
      gpu        = each.value.gpus > 0
      spot       = each.value.spot
      efa        = each.value.efa # EFA workers run in host networking: the agent serves them their task role
    }),
    # only for a group with the S3 model cache: the other groups' user data stays byte for byte what it was
    each.value.model_cache ? templatefile("${path.module}/model_cache.sh.tftpl", { cache_dir = var.model_cache_dir }) : "",
  ]))

  tag_specifications {
    resource_type = "instance"
    tags          = merge(local.tags, { Name = "${var.name}-${each.key}", NodeGroup = each.key })
  }

  tag_specifications {
    resource_type = "volume"
    tags          = merge(local.tags, { Name = "${var.name}-${each.key}" })
  }

  tags = local.tags
}

# Instances follow the services: the capacity provider scales each group from zero to the tasks that need
# placing, and back to zero when `make stop` scales the services down, so idle GPUs do not run until destroy.
resource "aws_autoscaling_group" "this" {
  for_each              = var.node_groups
  name_prefix           = "${var.name}-${each.key}-"
  min_size              = 0
  max_size              = max(each.value.count, 1)
  vpc_zone_identifier   = each.value.placement_group ? slice(var.subnet_ids, 0, 1) : var.subnet_ids
  placement_group       = each.value.placement_group ? aws_placement_group.this[each.key].id : null
  protect_from_scale_in = true # ECS managed termination protection: never reclaim an instance with a task on it
  health_check_type     = "EC2"
  # Spot: launch a replacement when AWS signals a raised interruption risk, before the two-minute notice.
  capacity_rebalance = each.value.spot

  # Spot groups draw from every listed type in the pools least likely to be interrupted
  # (price-capacity-optimized); on_demand_base instances stay on-demand whatever Spot does.
  mixed_instances_policy {
    instances_distribution {
      on_demand_base_capacity                  = each.value.spot ? each.value.on_demand_base : 0
      on_demand_percentage_above_base_capacity = each.value.spot ? 0 : 100
      spot_allocation_strategy                 = "price-capacity-optimized"
    }

    launch_template {
      launch_template_specification {
        launch_template_id = aws_launch_template.this[each.key].id
        version            = aws_launch_template.this[each.key].latest_version
      }

      dynamic "override" {
        for_each = length(each.value.instance_types) > 1 ? each.value.instance_types : []
        content {
          instance_type = override.value
        }
      }
    }
  }

  tag {
    key                 = "AmazonECSManaged"
    value               = "true"
    propagate_at_launch = true
  }

  dynamic "tag" {
    for_each = local.tags
    content {
      key                 = tag.key
      value               = tag.value
      propagate_at_launch = true
    }
  }

  lifecycle {
    ignore_changes = [desired_capacity] # owned by the capacity provider
  }
}

resource "aws_ecs_capacity_provider" "this" {
  for_each = var.node_groups
  name     = "${var.name}-${each.key}"

  auto_scaling_group_provider {
    auto_scaling_group_arn         = aws_autoscaling_group.this[each.key].arn
    managed_termination_protection = "ENABLED"
    managed_draining               = "ENABLED"

    managed_scaling {
      status                    = "ENABLED"
      target_capacity           = 100
      minimum_scaling_step_size = 1
      maximum_scaling_step_size = max(each.value.count, 1)
      instance_warmup_period    = 300
    }
  }

  tags = local.tags
}

resource "aws_ecs_cluster_capacity_providers" "this" {
  cluster_name       = aws_ecs_cluster.this.name
  capacity_providers = [for cp in aws_ecs_capacity_provider.this : cp.name]
}
