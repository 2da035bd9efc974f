locals {
  tags       = merge(var.tags, { Component = "ray" })
  head_dns   = "head.${aws_service_discovery_private_dns_namespace.this.name}"
  components = toset(["ray-head", "ray-control", "ray-worker", "trainer", "gpu-metrics"])
  # One place for the services' names: the control task's role (iam module) may scale exactly these.
  service_names        = { for s in ["head", "control"] : s => "${var.name}-ray-${s}" }
  worker_service_names = { for g, w in var.worker_groups : g => "${var.name}-ray-${w.node_group}" }
  worker_mode          = { for g, w in var.worker_groups : g => w.efa ? "host" : "awsvpc" } # EFA on ECS needs host networking
}

# The head registers its task IP under head.<name>.rayfleet.internal; a 10 s TTL means a replaced head is
# found within seconds by the workers that wait for it.
resource "aws_service_discovery_private_dns_namespace" "this" {
  name        = "${var.name}.rayfleet.internal"
  description = "Private names of ${var.name}'s Ray cluster"
  vpc         = var.vpc_id
  tags        = local.tags
}

resource "aws_service_discovery_service" "head" {
  name = "head"

  dns_config {
    namespace_id   = aws_service_discovery_private_dns_namespace.this.id
    routing_policy = "MULTIVALUE"

    dns_records {
      type = "A"
      ttl  = 10
    }
  }

  health_check_custom_config {
    failure_threshold = 1
  }

  tags = local.tags
}

resource "aws_cloudwatch_log_group" "this" {
  for_each          = local.components
  name              = "/rayfleet/${var.name}/${each.value}"
  retention_in_days = var.log_retention_days
  kms_key_id        = var.kms_key_arn
  tags              = local.tags
}

# One worker task per worker instance: it takes all of the instance's GPUs, so a second cannot fit anyway,
# and distinctInstance makes the intent explicit.
resource "aws_ecs_service" "head" {
  name                               = local.service_names.head
  cluster                            = var.cluster_arn
  task_definition                    = aws_ecs_task_definition.head.arn
  desired_count                      = 1
  enable_execute_command             = true
  propagate_tags                     = "SERVICE"
  deployment_minimum_healthy_percent = 0 # a second head would split the cluster: replace, never overlap
  deployment_maximum_percent         = 100
  wait_for_steady_state              = false

  capacity_provider_strategy {
    capacity_provider = var.capacity_providers["head"]
    weight            = 1
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = concat([var.security_group_id], var.serve == null ? [] : [var.serve.security_group_id], var.gcs_store == null ? [] : [var.gcs_store.client_security_group_id])
    assign_public_ip = false
  }

  service_registries {
    registry_arn = aws_service_discovery_service.head.arn
  }

  placement_constraints {
    type       = "memberOf"
    expression = "attribute:rayfleet.node-group == head"
  }

  # make stop/start and autostop own the count after creation; `make start` scales to the configured count.
  lifecycle {
    ignore_changes = [desired_count]
  }

  tags = local.tags
}

# One service per worker group, at the group's min until a run needs more (the queue's scaling, make start).
resource "aws_ecs_service" "worker" {
  for_each                           = var.worker_groups
  name                               = local.worker_service_names[each.key]
  cluster                            = var.cluster_arn
  task_definition                    = aws_ecs_task_definition.worker[each.key].arn
  desired_count                      = each.value.min
  enable_execute_command             = true
  propagate_tags                     = "SERVICE"
  deployment_minimum_healthy_percent = 0 # GPUs are scarce: restart in place instead of needing spare ones
  deployment_maximum_percent         = 100
  wait_for_steady_state              = false

  capacity_provider_strategy {
    capacity_provider = var.capacity_providers[each.value.node_group]
    weight            = 1
  }

  dynamic "network_configuration" {
    for_each = local.worker_mode[each.key] == "awsvpc" ? [1] : []
    content {
      subnets          = var.subnet_ids
      security_groups  = [var.security_group_id]
      assign_public_ip = false
    }
  }

  placement_constraints {
    type       = "memberOf"
    expression = "attribute:rayfleet.node-group == ${each.value.node_group}"
  }

  placement_constraints {
    type = "distinctInstance"
  }

  # make stop/start and autostop own the count after creation; `make start` scales to the configured count.
  lifecycle {
    ignore_changes = [desired_count]
  }

  # Terraform orders creation; the workers' entrypoint additionally waits until the head's GCS answers.
  depends_on = [aws_ecs_service.head]
  tags       = local.tags
}

# The control task (head_snapshot, autostop) beside the head, on the head's instances. It holds no Ray node,
# so autostop, which stops the head, stops this service last; `make start` brings all three back.
resource "aws_ecs_service" "control" {
  name                               = local.service_names.control
  cluster                            = var.cluster_arn
  task_definition                    = aws_ecs_task_definition.control.arn
  desired_count                      = 1
  propagate_tags                     = "SERVICE"
  deployment_minimum_healthy_percent = 0 # two would both scale the services
  deployment_maximum_percent         = 100
  wait_for_steady_state              = false

  capacity_provider_strategy {
    capacity_provider = var.capacity_providers["head"]
    weight            = 1
  }

  network_configuration {
    subnets          = var.subnet_ids
    security_groups  = [var.security_group_id]
    assign_public_ip = false
  }

  placement_constraints {
    type       = "memberOf"
    expression = "attribute:rayfleet.node-group == head"
  }

  # make stop/start and autostop own the count after creation; `make start` scales to the configured count.
  lifecycle {
    ignore_changes = [desired_count]
  }

  depends_on = [aws_ecs_service.head]
  tags       = local.tags
}
